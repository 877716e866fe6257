#include "symcomm/types.h"

#include <algorithm>
#include <array>
#include <string>

namespace symcomm {

size_t dtype_size(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32: return 4;
    case DataType::kFloat64: return 8;
    case DataType::kFloat16: return 2;
    case DataType::kBFloat16: return 2;
    case DataType::kInt8: return 1;
    case DataType::kUInt8: return 1;
    case DataType::kInt32: return 4;
    case DataType::kInt64: return 8;
  }
  return 0;
}

namespace {
template <class E, size_t N>
struct Names {
  std::array<std::string_view, N> names;
  std::string_view get(E v) const {
    auto i = static_cast<size_t>(v);
    return i < N ? names[i] : std::string_view("invalid");
  }
};

constexpr Names<DataType, 8> kDtypeNames{
    {"float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "int64"}};
constexpr Names<ReduceOp, 5> kOpNames{{"sum", "prod", "min", "max", "avg"}};
constexpr Names<Collective, 6> kCollNames{
    {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "barrier"}};
constexpr Names<Algorithm, 6> kAlgoNames{{"auto", "one_shot", "two_shot", "direct", "copy_engine", "nccl"}};
constexpr Names<BackendKind, 2> kBackendNames{{"host", "cuda"}};
constexpr Names<Contention, 3> kContentionNames{{"auto", "low", "throughput"}};
constexpr Names<KernelPath, 19> kPathNames{{"none", "host", "nccl", "copy_engine", "barrier", "ll", "ll128",
                                            "one_shot_staged", "two_shot_staged", "two_shot_zero_copy", "two_shot_push",
                                            "direct_staged", "direct_zero_copy", "multi_staged", "multi_zero_copy",
                                            "multi_push", "ll128_two_shot", "host_scheduled", "scheduled"}};

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

template <class E, size_t N>
std::optional<E> parse_by_name(const Names<E, N>& table, const std::string& s) {
  for (size_t i = 0; i < N; ++i) {
    if (table.names[i] == s) return static_cast<E>(i);
  }
  return std::nullopt;
}
}  // namespace

std::string_view to_string(DataType v) { return kDtypeNames.get(v); }
std::string_view to_string(ReduceOp v) { return kOpNames.get(v); }
std::string_view to_string(Collective v) { return kCollNames.get(v); }
std::string_view to_string(Algorithm v) { return kAlgoNames.get(v); }
std::string_view to_string(BackendKind v) { return kBackendNames.get(v); }
std::string_view to_string(Contention v) { return kContentionNames.get(v); }
std::string_view to_string(KernelPath v) { return kPathNames.get(v); }

bool is_valid(DataType v) { return static_cast<size_t>(v) < kDtypeNames.names.size(); }
bool is_valid(ReduceOp v) { return static_cast<size_t>(v) < kOpNames.names.size(); }
bool is_valid(Collective v) { return static_cast<size_t>(v) < kCollNames.names.size(); }
bool is_valid(Algorithm v) { return static_cast<size_t>(v) < kAlgoNames.names.size(); }
bool is_valid(BackendKind v) { return static_cast<size_t>(v) < kBackendNames.names.size(); }
bool is_valid(Contention v) { return static_cast<size_t>(v) < kContentionNames.names.size(); }

std::optional<DataType> parse_dtype(std::string_view text) {
  std::string s = lower(text);
  if (s == "float" || s == "f32" || s == "fp32") return DataType::kFloat32;
  if (s == "double" || s == "f64" || s == "fp64") return DataType::kFloat64;
  if (s == "half" || s == "f16" || s == "fp16") return DataType::kFloat16;
  if (s == "bf16") return DataType::kBFloat16;
  if (s == "int" || s == "i32") return DataType::kInt32;
  if (s == "i64" || s == "long") return DataType::kInt64;
  if (s == "i8" || s == "char") return DataType::kInt8;
  if (s == "u8" || s == "byte") return DataType::kUInt8;
  return parse_by_name(kDtypeNames, s);
}
std::optional<ReduceOp> parse_reduce_op(std::string_view text) {
  std::string s = lower(text);
  if (s == "product") return ReduceOp::kProd;
  if (s == "mean" || s == "average") return ReduceOp::kAvg;
  return parse_by_name(kOpNames, s);
}
std::optional<Collective> parse_collective(std::string_view text) {
  std::string s = lower(text);
  std::replace(s.begin(), s.end(), '-', '_');
  if (s == "allreduce") return Collective::kAllReduce;
  if (s == "allgather") return Collective::kAllGather;
  if (s == "reducescatter") return Collective::kReduceScatter;
  if (s == "alltoall") return Collective::kAllToAll;
  return parse_by_name(kCollNames, s);
}
std::optional<Algorithm> parse_algorithm(std::string_view text) {
  std::string s = lower(text);
  std::replace(s.begin(), s.end(), '-', '_');
  return parse_by_name(kAlgoNames, s);
}
std::optional<BackendKind> parse_backend(std::string_view text) { return parse_by_name(kBackendNames, lower(text)); }

}  // namespace symcomm
