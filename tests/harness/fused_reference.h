#pragma once
// Inputs and an independent float64 reference for the fused GEMM + collective tests (host and GPU).
//
// Inputs are pseudo-random values in [-1, 1) rounded to the dtype here (bfloat16 by truncation, float16 by
// the compiler's _Float16), and the reference reads them back as doubles, so it multiplies exactly the
// values the library sees. The reference is a plain triple loop in float64 over the global (gathered) view,
// written from the definition of the operations, not from the library's row decomposition.
//
// Error bound of one output element (fused_tolerance): the library multiplies in float32 with any
// summation order, so |fl(Σ a·b) − Σ a·b| ≤ γ_K · Σ|a·b| with γ_K ≈ K·2^-24 (Higham, Accuracy and Stability of
// Numerical Algorithms, §3.5); summing R partial results in float32 adds at most R·2^-24 · Σ|a·b|; and the one
// rounding to the output dtype adds half an ulp, u·|ref| with u = 2^-8 (bfloat16), 2^-11 (float16), 2^-24
// (float32). For matmul + reduce-scatter the bar is an unfused GEMM in the output dtype followed by
// a float32-accumulating reduce-scatter, which rounds each rank's partial product P_q to the output dtype
// first: rs_tolerance adds u·Σ_q|P_q| for those roundings (the paths that keep partials in float32 stay
// well inside it).

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "harness/rank_harness.h"
#include "symcomm/types.h"

namespace symcomm::testing {

/// A row-major tensor in host memory: bytes in the dtype and the exact values as doubles.
struct HostTensor {
  DataType dtype = DataType::kBFloat16;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  std::vector<double> values;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t e : shape) n *= e;
    return n;
  }
};

inline double round_to(DataType d, double v, uint8_t* dst) {
  switch (d) {
    case DataType::kBFloat16: {
      float f = static_cast<float>(v);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      uint16_t h = static_cast<uint16_t>(bits >> 16);
      std::memcpy(dst, &h, 2);
      bits = uint32_t{h} << 16;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case DataType::kFloat16: {
      _Float16 h = static_cast<_Float16>(v);
      std::memcpy(dst, &h, 2);
      return static_cast<double>(h);
    }
    default: {
      float f = static_cast<float>(v);
      std::memcpy(dst, &f, 4);
      return f;
    }
  }
}

inline double read_as_double(DataType d, const uint8_t* p) {
  switch (d) {
    case DataType::kBFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      uint32_t bits = uint32_t{h} << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case DataType::kFloat16: {
      _Float16 h;
      std::memcpy(&h, p, 2);
      return static_cast<double>(h);
    }
    default: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
  }
}

/// Random tensor in [-1, 1), deterministic in `seed` (every rank can rebuild every other rank's input).
inline HostTensor random_tensor(DataType d, std::vector<int64_t> shape, uint64_t seed) {
  HostTensor t{d, std::move(shape), {}, {}};
  const size_t n = static_cast<size_t>(t.numel()), es = dtype_size(d);
  t.bytes.resize(n * es);
  t.values.resize(n);
  for (size_t i = 0; i < n; ++i) {
    double u = static_cast<double>(mix64(seed * 0x9e3779b97f4a7c15ull + i) >> 11) * 0x1p-53;
    t.values[i] = round_to(d, 2 * u - 1, &t.bytes[i * es]);
  }
  return t;
}

/// Half an ulp of the dtype, relative.
inline double unit_roundoff(DataType d) {
  return d == DataType::kBFloat16 ? 0x1p-8 : d == DataType::kFloat16 ? 0x1p-11 : 0x1p-24;
}

/// Bound of |got − ref| (see the file comment): k terms per float32 dot product, `parts` partial sums.
inline double fused_tolerance(DataType out, double ref, double abs_dot, int64_t k, int parts) {
  return unit_roundoff(out) * std::fabs(ref) * 1.001 + 1.01 * static_cast<double>(k + parts) * 0x1p-24 * abs_dot +
         1e-30;
}

/// The matmul + reduce-scatter bound: fused_tolerance plus one rounding of every rank's partial product.
inline double rs_tolerance(DataType out, double ref, double abs_dot, double abs_partials, int64_t k, int parts) {
  return fused_tolerance(out, ref, abs_dot, k, parts) + unit_roundoff(out) * abs_partials * 1.001;
}

/// Reference of all_gather_matmul: the gathered A (shards[r] concatenated along `dim`) and A·B, with the
/// sum of |a·b| per output element for the error bound.
struct AgReference {
  std::vector<int64_t> gathered_shape;
  std::vector<double> gathered;
  std::vector<std::vector<double>> out, abs_dot;
};

inline AgReference ag_reference(const std::vector<HostTensor>& shards, int dim, const std::vector<HostTensor>& bs) {
  AgReference r;
  const int world = static_cast<int>(shards.size());
  const std::vector<int64_t>& s = shards[0].shape;
  r.gathered_shape = s;
  r.gathered_shape[dim] *= world;
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < dim; ++i) outer *= s[i];
  for (size_t i = dim + 1; i < s.size(); ++i) inner *= s[i];
  const int64_t block = s[dim] * inner;  // elements of one shard per outer index
  for (int64_t o = 0; o < outer; ++o) {
    for (int q = 0; q < world; ++q) {
      const auto& v = shards[q].values;
      r.gathered.insert(r.gathered.end(), v.begin() + o * block, v.begin() + (o + 1) * block);
    }
  }
  const int64_t k = s.back();
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < r.gathered_shape.size(); ++i) rows *= r.gathered_shape[i];
  for (const HostTensor& b : bs) {
    const int64_t n = b.shape[1];
    std::vector<double> c(rows * n, 0.0), ad(rows * n, 0.0);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0, aacc = 0;
        for (int64_t x = 0; x < k; ++x) {
          acc += r.gathered[i * k + x] * b.values[x * n + j];
          aacc += std::fabs(r.gathered[i * k + x] * b.values[x * n + j]);
        }
        c[i * n + j] = acc;
        ad[i * n + j] = aacc;
      }
    }
    r.out.push_back(std::move(c));
    r.abs_dot.push_back(std::move(ad));
  }
  return r;
}

/// Reference of matmul_reduce_scatter for `rank`: Σ_r a_r·b_r over all ranks, block `rank` along `dim`,
/// divided by the world size for avg; and Σ|a·b| and Σ_q|a_q·b_q| (the ranks' partial products) per element.
struct RsReference {
  std::vector<double> out, abs_dot, abs_partials;
};

inline RsReference rs_reference(const std::vector<HostTensor>& as, const std::vector<HostTensor>& bs, int dim, int rank,
                                bool avg) {
  const int world = static_cast<int>(as.size());
  const std::vector<int64_t>& s = as[0].shape;
  const int64_t k = s.back(), n = bs[0].shape[1];
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < dim; ++i) outer *= s[i];
  for (size_t i = dim + 1; i + 1 < s.size(); ++i) inner *= s[i];
  const int64_t local = s[dim] / world;  // extent of the scatter dim per rank
  RsReference r;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t d = 0; d < local; ++d) {
      for (int64_t in = 0; in < inner; ++in) {
        const int64_t row = (o * s[dim] + rank * local + d) * inner + in;  // row of the full product
        for (int64_t j = 0; j < n; ++j) {
          double acc = 0, aacc = 0, pacc = 0;
          for (int q = 0; q < world; ++q) {
            double part = 0;
            for (int64_t x = 0; x < k; ++x) {
              const double t = as[q].values[row * k + x] * bs[q].values[x * n + j];
              part += t;
              aacc += std::fabs(t);
            }
            acc += part;
            pacc += std::fabs(part);
          }
          r.out.push_back(avg ? acc / world : acc);
          r.abs_dot.push_back(avg ? aacc / world : aacc);
          r.abs_partials.push_back(avg ? pacc / world : pacc);
        }
      }
    }
  }
  return r;
}

}  // namespace symcomm::testing
