// Host engine of the fused operations: the reference implementation on a CPU BLAS (OpenBLAS from Debian,
// found by cmake/Dependencies.cmake). Everything runs in order on the calling thread, so both lanes are one;
// events are no-ops. 16-bit inputs are widened to float32 and multiplied with sgemm (float32 accumulation),
// like the CUDA path's cuBLASLt GEMMs; results are rounded once to the output dtype.

#include <cstring>
#include <memory>
#include <vector>

#include "algos/half.h"
#include "base/check.h"
#include "fused/fused_engine.h"

#if SYMCOMM_HAVE_BLAS
#include <cblas.h>
#endif

namespace symcomm::detail::fused {
namespace {

float load(DataType dt, const void* p, int64_t i) {
  switch (dt) {
    case DataType::kBFloat16: return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DataType::kFloat16: return half_to_float(static_cast<const uint16_t*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

void store(DataType dt, void* p, int64_t i, float v) {
  switch (dt) {
    case DataType::kBFloat16: static_cast<uint16_t*>(p)[i] = float_to_bf16(v); break;
    case DataType::kFloat16: static_cast<uint16_t*>(p)[i] = float_to_half(v); break;
    default: static_cast<float*>(p)[i] = v; break;
  }
}

// rows × cols of a row-major matrix with leading dimension ld, as dense float32.
std::vector<float> widen(DataType dt, const void* p, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) v[r * cols + c] = load(dt, p, r * ld + c);
  }
  return v;
}

void sgemm(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t m, int64_t n,
           int64_t k) {
#if SYMCOMM_HAVE_BLAS
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
              1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb), 0.0f, c, static_cast<int>(ldc));
#else
  SYMCOMM_THROW(kUnsupported, "this build of symcomm has no BLAS: the host backend cannot run fused GEMMs");
#endif
}

class HostEngine final : public Engine {
 public:
  void gemm(const Gemm& g, Lane) override {
    if (g.m == 0 || g.n == 0) return;
    if (g.k == 0) {
      for (int64_t r = 0; r < g.m; ++r) {
        for (int64_t c = 0; c < g.n; ++c) {
          store(g.c_dtype, g.c, r * g.ldc + c, g.acc ? g.beta * load(g.c_dtype, g.acc, r * g.ldacc + c) : 0.0f);
        }
      }
      return;
    }
    if (g.ab == DataType::kFloat32 && g.c_dtype == DataType::kFloat32 && g.acc == nullptr && g.alpha == 1.0f) {
      sgemm(static_cast<const float*>(g.a), g.lda, static_cast<const float*>(g.b), g.ldb, static_cast<float*>(g.c),
            g.ldc, g.m, g.n, g.k);
      return;
    }
    std::vector<float> a = widen(g.ab, g.a, g.m, g.k, g.lda), b = widen(g.ab, g.b, g.k, g.n, g.ldb);
    std::vector<float> c(static_cast<size_t>(g.m * g.n));
    sgemm(a.data(), g.k, b.data(), g.n, c.data(), g.n, g.m, g.n, g.k);
    for (int64_t r = 0; r < g.m; ++r) {
      for (int64_t col = 0; col < g.n; ++col) {
        float v = g.alpha * c[r * g.n + col];
        if (g.acc != nullptr) v += g.beta * load(g.c_dtype, g.acc, r * g.ldacc + col);
        store(g.c_dtype, g.c, r * g.ldc + col, v);
      }
    }
  }

  void copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height, Lane) override {
    if (width == 0 || height == 0) return;  // empty shards may come with null pointers
    for (size_t r = 0; r < height; ++r) {
      std::memcpy(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
    }
  }

  void store_rows(const float* src, int64_t rows, int64_t cols, void* dst, int64_t ld_dst, DataType dtype, float scale,
                  Lane) override {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) store(dtype, dst, r * ld_dst + c, scale * src[r * cols + c]);
    }
  }

  CollOptions coll(Lane lane) const override {
    return CollOptions{.contention = lane == Lane::kSide ? Contention::kLow : Contention::kAuto};
  }
  void fork() override {}
  void signal(int, Lane) override {}
  void wait(int, Lane) override {}
  void join() override {}
  void* temp(size_t bytes) override {
    temps_.push_back(std::make_unique<char[]>(bytes));
    return temps_.back().get();
  }
  void finish() override { temps_.clear(); }

 private:
  std::vector<std::unique_ptr<char[]>> temps_;
};

}  // namespace

std::unique_ptr<Engine> make_host_engine() {
#if !SYMCOMM_HAVE_BLAS
  SYMCOMM_THROW(kUnsupported, "this build of symcomm has no BLAS: the host backend cannot run fused GEMMs");
#endif
  return std::make_unique<HostEngine>();
}

}  // namespace symcomm::detail::fused
