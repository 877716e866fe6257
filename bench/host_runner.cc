// symcomm-bench on the host backend: symcomm's collectives, and with --baseline mpi Open MPI's, on the same
// buffers (from the symmetric heap by default, --buffers plain for ordinary memory), batch by batch in
// alternation so that both see the same machine state.

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "algos/half.h"
#include "bench.h"
#include "host_util.h"
#if defined(SYMCOMM_BENCH_MPI)
#include "mpi_support.h"
#endif

namespace symcomm::bench {

using Clock = std::chrono::steady_clock;

void put_value(DataType d, void* buf, size_t i, double v) {
  switch (d) {
    case DataType::kFloat32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(buf)[i] = v; break;
    case DataType::kFloat16: static_cast<uint16_t*>(buf)[i] = detail::float_to_half(static_cast<float>(v)); break;
    case DataType::kBFloat16: static_cast<uint16_t*>(buf)[i] = detail::float_to_bf16(static_cast<float>(v)); break;
    case DataType::kInt8: static_cast<int8_t*>(buf)[i] = static_cast<int8_t>(v); break;
    case DataType::kUInt8: static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v); break;
    case DataType::kInt32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v); break;
  }
}

double get_value(DataType d, const void* buf, size_t i) {
  switch (d) {
    case DataType::kFloat32: return static_cast<const float*>(buf)[i];
    case DataType::kFloat64: return static_cast<const double*>(buf)[i];
    case DataType::kFloat16: return detail::half_to_float(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kBFloat16: return detail::bf16_to_float(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kInt8: return static_cast<const int8_t*>(buf)[i];
    case DataType::kUInt8: return static_cast<const uint8_t*>(buf)[i];
    case DataType::kInt32: return static_cast<const int32_t*>(buf)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
  }
  return 0;
}

double HostPattern::input(size_t j) const {
  switch (c) {
    case Collective::kAllReduce:
    case Collective::kReduceScatter: return (me + 1) + static_cast<double>(j % 7);
    default: return static_cast<double>((me * 5 + j) % 61);
  }
}

double HostPattern::expected(size_t i, ReduceOp op) const {
  switch (c) {
    case Collective::kAllReduce:
    case Collective::kReduceScatter: {
      size_t j = c == Collective::kAllReduce ? i : me * count + i;
      double v = static_cast<double>(j % 7);
      if (op == ReduceOp::kSum) return n * (n + 1) / 2.0 + n * v;
      if (op == ReduceOp::kMax) return n + v;
      if (op == ReduceOp::kMin) return 1 + v;
      return NAN;
    }
    case Collective::kAllGather: return static_cast<double>(((i / count) * 5 + i % count) % 61);
    case Collective::kBroadcast: return static_cast<double>(i % 61);  // root 0
    case Collective::kAllToAll: return static_cast<double>(((i / count) * 5 + me * count + i % count) % 61);
    default: return NAN;
  }
}

HostSizes host_sizes_for(Collective c, size_t bytes, size_t es, int n) {
  // nccl-tests convention: `bytes` is the larger of the total input and output sizes.
  HostSizes s{};
  size_t total = bytes / es;
  switch (c) {
    case Collective::kAllReduce:
    case Collective::kBroadcast:
      s.count = total;
      s.in_elems = s.out_elems = total;
      break;
    case Collective::kAllGather:
      s.count = total / n;
      s.in_elems = s.count;
      s.out_elems = s.count * n;
      break;
    case Collective::kReduceScatter:
      s.count = total / n;
      s.in_elems = s.count * n;
      s.out_elems = s.count;
      break;
    case Collective::kAllToAll:
      s.count = total / n;
      s.in_elems = s.out_elems = s.count * n;
      break;
    default: break;
  }
  s.bytes = std::max(s.in_elems, s.out_elems) * es;
  return s;
}

long long host_count_wrong(const HostPattern& p, DataType d, ReduceOp op, const void* out, size_t out_elems) {
  long long wrong = 0;
  for (size_t i = 0; i < out_elems; ++i) {
    double want = p.expected(i, op);
    if (std::isnan(want)) return -1;
    if (get_value(d, out, i) != want) ++wrong;
  }
  return wrong;
}

int host_iters_for(const BenchOptions& o, size_t bytes) {
  size_t budget = size_t{8} << 20;  // bytes per batch, roughly
  size_t it = std::max<size_t>(2, budget / std::max<size_t>(bytes, 1));
  return static_cast<int>(std::min<size_t>(it, static_cast<size_t>(o.iters)));
}

double time_host_batch(const std::function<void()>& op, const std::function<void()>& sync, int iters) {
  sync();
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) op();
  const auto t1 = Clock::now();
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / iters;
}

long long run_host(Communicator& comm, const BenchOptions& o, Reporter& rep) {
  const int n = comm.world_size(), me = comm.rank();
  const size_t es = dtype_size(o.dtype);
  bool use_mpi = false;
  for (const auto& b : o.baselines) use_mpi = use_mpi || b == "mpi";
  bool plain = std::find(o.extra.begin(), o.extra.end(), "plain") != o.extra.end();
  size_t max_elems = o.max_bytes / es + n;
  std::vector<uint8_t> plain_in, plain_out;
  uint8_t* in = nullptr;
  uint8_t* out = nullptr;
  if (plain) {
    plain_in.resize(max_elems * es * 2);
    plain_out.resize(max_elems * es * 2);
    in = plain_in.data();
    out = plain_out.data();
  } else {
    in = static_cast<uint8_t*>(comm.alloc(max_elems * es * 2));
    out = static_cast<uint8_t*>(comm.alloc(max_elems * es * 2));
  }
  long long total_wrong = 0;
  rep.header(fmt::format("symcomm-bench host backend, {} ranks, dtype {}, op {}, buffers {}", n, to_string(o.dtype),
                         to_string(o.op), plain ? "plain" : "symmetric heap"));
  for (Collective c : o.collectives) {
    for (size_t bytes : size_sweep(o, es * n)) {
      HostSizes s = host_sizes_for(c, bytes, es, n);
      HostPattern pat{c, n, me, s.count};
      for (size_t j = 0; j < s.in_elems; ++j) put_value(o.dtype, in, j, pat.input(j));
      CollOptions copts{.algorithm = o.algorithm, .contention = o.contention};
      auto run_symcomm = [&] {
        switch (c) {
          case Collective::kAllReduce: comm.all_reduce(in, out, s.count, o.dtype, o.op, copts); break;
          case Collective::kAllGather: comm.all_gather(in, out, s.count, o.dtype, copts); break;
          case Collective::kReduceScatter: comm.reduce_scatter(in, out, s.count, o.dtype, o.op, copts); break;
          case Collective::kBroadcast: comm.broadcast(in, out, s.count, o.dtype, 0, copts); break;
          case Collective::kAllToAll: comm.all_to_all(in, out, s.count, o.dtype, copts); break;
          default: break;
        }
      };
      struct Impl {
        std::string name;
        std::function<void()> op, sync;
        std::vector<double> batches;
        long long wrong = 0;
        std::string algo = "-";
      };
      std::vector<Impl> impls;
      impls.push_back({"symcomm", run_symcomm, [&] { comm.barrier(); }, {}, 0});
#if defined(SYMCOMM_BENCH_MPI)
      if (use_mpi && mpi::supports(c, o.dtype, o.op)) {
        impls.push_back(
            {"mpi", [&] { mpi::run(c, in, out, s.count, o.dtype, o.op, 0); }, [] { mpi::barrier(); }, {}, 0});
      }
#endif
      int iters = host_iters_for(o, s.bytes);
      for (Impl& impl : impls) {
        std::memset(out, 0xa5, s.out_elems * es);
        for (int w = 0; w < o.warmup; ++w) impl.op();
        impl.wrong = o.check ? host_count_wrong(pat, o.dtype, o.op, out, s.out_elems) : -1;
        if (impl.name == "symcomm") impl.algo = std::string(to_string(comm.last_algorithm()));
      }
      for (int b = 0; b < o.batches; ++b) {
        for (Impl& impl : impls) impl.batches.push_back(time_host_batch(impl.op, impl.sync, iters));
      }
      for (Impl& impl : impls) {
        Measurement m{.collective = std::string(to_string(c)),
                      .backend = "host",
                      .impl = impl.name,
                      .algo = impl.algo,
                      .mode = "eager",
                      .dtype = std::string(to_string(o.dtype)),
                      .op = std::string(to_string(o.op)),
                      .bytes = s.bytes,
                      .count = s.count,
                      .world_size = n,
                      .time_us = median(impl.batches),
                      .wrong = impl.wrong,
                      .extra_json = {}};
        fill_bandwidth(m, c);
        rep.add(m);
        if (impl.wrong > 0) total_wrong += impl.wrong;
      }
    }
  }
  if (!plain) {
    comm.free(out);
    comm.free(in);
  }
  if (use_mpi) rep.print_ratios("mpi");
  return total_wrong;
}

}  // namespace symcomm::bench
