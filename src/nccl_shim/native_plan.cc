#include "native_plan.h"

#include <cstdint>
#include <unordered_map>

namespace symcomm::nccl_shim {

const char* native_coll_name(NativeColl c) noexcept {
  switch (c) {
    case NativeColl::kAllReduce: return "all_reduce";
    case NativeColl::kAllGather: return "all_gather";
    case NativeColl::kReduceScatter: return "reduce_scatter";
    case NativeColl::kBroadcast: return "broadcast";
  }
  return "unknown";
}

// NOTE [drop-in size limits]
// Payloads up to these sizes run on symcomm in auto mode; larger ones go to NCCL. The drop-in library passes
// the caller's buffers, which are not in symcomm's symmetric heap, so its collectives run the staged kernels
// (copy in, exchange through the staging buffer, copy out). Measured through torch.distributed on 2 x H200
// (bench/nccl_shim_torch_compare.py, bf16, with / without the drop-in, eager and CUDA graph): all-reduce
// 0.27-0.78 x up to 16 MB; all-gather and reduce-scatter 0.29-0.46 x up to 1 MB, but 0.95 x at 4 MB in a graph
// (the staged copies cost what the direct kernels gain), so they stop at 1 MB. World sizes above 2 keep only
// the all-reduce sizes where symcomm's kernels were ahead of NCCL at 4 ranks on 4 x H100 both eager and in a
// CUDA graph (one-shot at 4 KB, symcomm-bench); the drop-in has not been measured there.
NativeLimits default_limits(int world_size) noexcept {
  NativeLimits l;
  auto set = [&](NativeColl c, size_t v) { l.max_bytes[static_cast<int>(c)] = v; };
  if (world_size <= 2) {
    set(NativeColl::kAllReduce, size_t{16} << 20);
    set(NativeColl::kAllGather, size_t{1} << 20);
    set(NativeColl::kReduceScatter, size_t{1} << 20);
    set(NativeColl::kBroadcast, size_t{1} << 20);
  } else {
    set(NativeColl::kAllReduce, size_t{4} << 10);
    set(NativeColl::kAllGather, 0);
    set(NativeColl::kReduceScatter, 0);
    set(NativeColl::kBroadcast, 0);
  }
  return l;
}

size_t nccl_type_size(ncclDataType_t dt) noexcept {
  switch (dt) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
  }
}

namespace {

bool is_float(DataType t) {
  return t == DataType::kFloat16 || t == DataType::kBFloat16 || t == DataType::kFloat32 || t == DataType::kFloat64;
}

}  // namespace

bool map_reduction(ncclDataType_t dt, ncclRedOp_t op, DataType* out_dtype, ReduceOp* out_op) noexcept {
  ReduceOp o;
  switch (op) {
    case ncclSum: o = ReduceOp::kSum; break;
    case ncclProd: o = ReduceOp::kProd; break;
    case ncclMax: o = ReduceOp::kMax; break;
    case ncclMin: o = ReduceOp::kMin; break;
    case ncclAvg: o = ReduceOp::kAvg; break;
    default: return false;  // a PreMulSum op made by ncclRedOpCreatePreMulSum
  }
  const bool wraps = o == ReduceOp::kSum || o == ReduceOp::kProd;
  DataType t;
  switch (dt) {
    case ncclInt8: t = DataType::kInt8; break;
    case ncclUint8: t = DataType::kUInt8; break;
    case ncclInt32: t = DataType::kInt32; break;
    case ncclInt64: t = DataType::kInt64; break;
    case ncclUint32:
      if (!wraps) return false;
      t = DataType::kInt32;
      break;
    case ncclUint64:
      if (!wraps) return false;
      t = DataType::kInt64;
      break;
    case ncclFloat16: t = DataType::kFloat16; break;
    case ncclBfloat16: t = DataType::kBFloat16; break;
    case ncclFloat32: t = DataType::kFloat32; break;
    case ncclFloat64: t = DataType::kFloat64; break;
    default: return false;
  }
  if (o == ReduceOp::kAvg && !is_float(t)) return false;
  *out_dtype = t;
  *out_op = o;
  return true;
}

NativePlan plan_call(NativeColl coll, size_t count, ncclDataType_t dt, ncclRedOp_t op, int world_size,
                     const NativeLimits& limits, bool respect_limits) noexcept {
  NativePlan p;
  const size_t size = nccl_type_size(dt);
  if (size == 0) {
    p.why_not = "a datatype nccl.h does not define";
    return p;
  }
  if (world_size < 2) {
    p.why_not = "a communicator of one rank";
    return p;
  }
  const size_t ranks = static_cast<size_t>(world_size);
  if (count > SIZE_MAX / size / ranks) {
    p.why_not = "a count whose byte size does not fit in size_t";
    return p;
  }
  const size_t one = count * size;
  p.bytes = (coll == NativeColl::kAllGather || coll == NativeColl::kReduceScatter) ? one * ranks : one;
  const bool reduces = coll == NativeColl::kAllReduce || coll == NativeColl::kReduceScatter;
  if (reduces) {
    if (!map_reduction(dt, op, &p.dtype, &p.op)) {
      p.why_not = "a datatype and op without an exact symcomm equivalent";
      return p;
    }
    p.count = count;
  } else {
    // Gathers and broadcasts move bytes: any datatype, as bytes.
    p.dtype = DataType::kUInt8;
    p.count = count * size;
  }
  if (count == 0) {
    p.why_not = "an empty call";
    return p;
  }
  if (respect_limits && p.bytes > limits.max_bytes[static_cast<int>(coll)]) {
    p.why_not = "a payload above the size limit";
    return p;
  }
  p.native = true;
  return p;
}

bool span_node_keys(const std::vector<int64_t>& words, int nranks, int fake_node_size, int max_node_ranks,
                    std::vector<int64_t>* keys) noexcept {
  if (nranks < 1 || words.size() != static_cast<size_t>(nranks) * kSpanWords) return false;
  auto word = [&](int r, SpanWord w) { return words[static_cast<size_t>(r) * kSpanWords + w]; };
  keys->assign(nranks, 0);
  std::unordered_map<int64_t, int> first;  // node key -> its lowest rank
  std::unordered_map<int, int> size;       // lowest rank -> the node's ranks
  for (int r = 0; r < nranks; ++r) {
    const int64_t key = fake_node_size > 0 ? r / fake_node_size : word(r, kSpanHost);
    const int lowest = first.try_emplace(key, r).first->second;
    (*keys)[r] = lowest;
    if (++size[lowest] > max_node_ranks) return false;
    if (word(r, kSpanHost) != word(lowest, kSpanHost) || word(lowest, kSpanPort) == 0) return false;
  }
  return true;
}

}  // namespace symcomm::nccl_shim
