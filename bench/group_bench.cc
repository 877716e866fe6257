// --extra group / --extra bucket (grouped collectives, ReduceScatterBucketer): the measuring loop, result
// checks and the host patterns. The CUDA patterns are in group_bench_cuda.cu. See group_bench.h.
#include "group_bench.h"

#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "algos/half.h"
#include "symcomm/bucketer.h"

namespace symcomm::bench::group {

bool wants(const BenchOptions& o, const char* what) {
  return std::find(o.extra.begin(), o.extra.end(), what) != o.extra.end();
}

double thread_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) * 1e-3;
}

bool checkable(DataType d) { return d == DataType::kFloat32 || d == DataType::kBFloat16 || d == DataType::kFloat16; }

int input_value(size_t j, int rank) { return static_cast<int>((j * 7 + static_cast<size_t>(rank) * 3) % 5); }

void fill_host(void* dst, DataType d, size_t first, size_t count, int rank) {
  for (size_t i = 0; i < count; ++i) {
    const float v = static_cast<float>(input_value(first + i, rank));
    if (d == DataType::kFloat32) static_cast<float*>(dst)[i] = v;
    if (d == DataType::kBFloat16) static_cast<uint16_t*>(dst)[i] = detail::float_to_bf16(v);
    if (d == DataType::kFloat16) static_cast<uint16_t*>(dst)[i] = detail::float_to_half(v);
  }
}

long long count_wrong(const void* out, DataType d, size_t count, int world,
                      const std::function<size_t(size_t)>& in_index) {
  if (!checkable(d)) return 0;
  long long wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    double want = 0;
    for (int r = 0; r < world; ++r) want += input_value(in_index(i), r);
    double got = d == DataType::kFloat32    ? static_cast<const float*>(out)[i]
                 : d == DataType::kBFloat16 ? detail::bf16_to_float(static_cast<const uint16_t*>(out)[i])
                                            : detail::half_to_float(static_cast<const uint16_t*>(out)[i]);
    if (got != want) ++wrong;
  }
  return wrong;
}

long long measure(const PatternSpec& spec, std::vector<Variant>& variants, const BatchClock& clock,
                  const BenchOptions& o, Communicator& comm, Reporter& rep) {
  struct Row {
    std::string name;
    double us, cpu_us;
    long long wrong;
  };
  std::vector<Row> rows;
  long long wrong_total = 0;
  for (Variant& v : variants) {
    for (int i = 0; i < spec.warmup; ++i) v.issue();
    std::vector<double> wall, cpu;
    for (int b = 0; b < spec.batches; ++b) {
      clock.start();
      const double c0 = thread_cpu_us();
      for (int i = 0; i < spec.iters; ++i) v.issue();
      const double c1 = thread_cpu_us();
      wall.push_back(clock.stop() / spec.iters);
      cpu.push_back((c1 - c0) / spec.iters / v.collectives);
    }
    Measurement m;
    m.collective = spec.pattern;
    m.backend = spec.backend;
    m.impl = v.name;
    m.algo.assign(1, '-');  // (a literal here trips a GCC 12 -Wrestrict false positive)
    m.dtype = std::string(to_string(o.dtype));
    m.op = std::string(to_string(o.op));
    m.bytes = spec.bytes;
    m.count = static_cast<size_t>(v.collectives);
    m.world_size = comm.world_size();
    m.time_us = median(wall);
    m.wrong = v.wrong;
    m.extra_json = fmt::format("\"cpu_us_per_coll\": {:.3f}, \"collectives\": {}", median(cpu), v.collectives);
    rep.add(m);
    rows.push_back({v.name, m.time_us, median(cpu), v.wrong});
    wrong_total += std::max<long long>(v.wrong, 0);
  }
  if (comm.rank() == 0) {
    double ref = 0;
    for (const Row& r : rows) ref = r.name == spec.reference ? r.us : ref;
    std::printf("\n# %s (%s, %d ranks, %zu bytes per instance): time of one instance, host CPU per collective\n",
                spec.pattern.c_str(), spec.backend.c_str(), comm.world_size(), spec.bytes);
    std::printf("%-26s %12s %14s %10s %8s\n", "variant", "time_us", "cpu_us/coll",
                "/ "
                "flat",
                "wrong");
    for (const Row& r : rows) {
      std::printf("%-26s %12.1f %14.3f %10.3f %8lld\n", r.name.c_str(), r.us, r.cpu_us, ref > 0 ? r.us / ref : 0.0,
                  r.wrong);
    }
    std::fflush(stdout);
  }
  return wrong_total;
}

long long run_host_patterns(Communicator& comm, const BenchOptions& o, Reporter& rep) {
  const bool do_group = wants(o, "group"), do_bucket = wants(o, "bucket");
  const int n = comm.world_size(), me = comm.rank();
  const DataType dt = o.dtype;
  const ReduceOp op = o.op;
  const size_t es = dtype_size(dt);
  const Shapes sh;
  BatchClock clock;
  std::chrono::steady_clock::time_point t0;
  clock.start = [&] {
    comm.barrier();
    t0 = std::chrono::steady_clock::now();
  };
  clock.stop = [&] { return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count(); };
  long long wrong = 0;
  rep.header(fmt::format("symcomm-bench --extra group/bucket, host backend, {} ranks, {}", n, to_string(dt)));

  if (do_group) {
    const size_t c = sh.group_tensor_bytes / es, total = c * sh.group_tensors;
    auto* slab = static_cast<char*>(comm.alloc(total * es));  // in place: 512 MB
    std::vector<Variant> vs;
    vs.push_back({"symcomm_grouped", sh.group_tensors, [&] {
                    CollectiveGroup g(comm);
                    for (int k = 0; k < sh.group_tensors; ++k) {
                      char* p = slab + k * c * es;
                      comm.all_reduce(p, p, c, dt, op);
                    }
                  }});
    vs.push_back({"symcomm_one_by_one", sh.group_tensors, [&] {
                    for (int k = 0; k < sh.group_tensors; ++k) {
                      char* p = slab + k * c * es;
                      comm.all_reduce(p, p, c, dt, op);
                    }
                  }});
    vs.push_back({"symcomm_flattened", 1, [&] { comm.all_reduce(slab, slab, total, dt, op); }});
    for (Variant& v : vs) {
      fill_host(slab, dt, 0, total, me);
      v.issue();
      v.wrong = op == ReduceOp::kSum ? count_wrong(slab, dt, total, n, [](size_t i) { return i; }) : 0;
    }
    PatternSpec spec{.pattern = "group_all_reduce",
                     .backend = "host",
                     .reference = "symcomm_flattened",
                     .bytes = total * es,
                     .warmup = 1,
                     .iters = 1,
                     .batches = std::max(1, std::min(o.batches, 3))};
    wrong += measure(spec, vs, clock, o, comm, rep);
    comm.free(slab);
  }
  if (do_bucket) {
    const size_t c = sh.bucket_out_bytes / es, total = c * sh.bucket_ops;
    auto* in = static_cast<char*>(comm.alloc(total * n * es));
    auto* out = static_cast<char*>(comm.alloc(total * es));
    ReduceScatterBucketer bucketer(comm);
    bool copy_results = false;
    // Records input k with a callback that copies its result out (when checking); its capture is larger than
    // std::function's inline 16 bytes (NOTE [callback storage]).
    auto record = [&](int k) {
      char* dst = out + k * c * es;
      bucketer.reduce_scatter_async(in + k * n * c * es, c, dt, op, [&, dst](const void* r, size_t cnt) {
        if (copy_results) std::memcpy(dst, r, cnt * es);
      });
    };
    std::vector<Variant> vs;
    vs.push_back({"symcomm_bucketer", sh.bucket_ops, [&] {
                    for (int k = 0; k < sh.bucket_ops; ++k) record(k);
                    bucketer.flush();
                  }});
    vs.push_back({"symcomm_grouped", sh.bucket_ops, [&] {
                    CollectiveGroup g(comm);
                    for (int k = 0; k < sh.bucket_ops; ++k) {
                      comm.reduce_scatter(in + k * n * c * es, out + k * c * es, c, dt, op);
                    }
                  }});
    vs.push_back({"symcomm_one_by_one", sh.bucket_ops, [&] {
                    for (int k = 0; k < sh.bucket_ops; ++k) {
                      comm.reduce_scatter(in + k * n * c * es, out + k * c * es, c, dt, op);
                    }
                  }});
    vs.push_back({"symcomm_flattened", 1, [&] { comm.reduce_scatter(in, out, total, dt, op); }});
    fill_host(in, dt, 0, total * n, me);
    auto per_op = [&](size_t i) { return (i / c) * n * c + me * c + i % c; };
    for (Variant& v : vs) {
      std::memset(out, 0xff, total * es);
      copy_results = true;
      v.issue();
      copy_results = false;
      const bool flat = v.name == "symcomm_flattened";
      v.wrong = op != ReduceOp::kSum ? 0
                : flat               ? count_wrong(out, dt, total, n, [&](size_t i) { return me * total + i; })
                                     : count_wrong(out, dt, total, n, per_op);
    }
    PatternSpec spec{.pattern = "bucket_reduce_scatter",
                     .backend = "host",
                     .reference = "symcomm_flattened",
                     .bytes = total * n * es,
                     .warmup = std::min(o.warmup, 3),
                     .iters = std::max(1, std::min(o.iters, 5)),
                     .batches = o.batches};
    wrong += measure(spec, vs, clock, o, comm, rep);
    // Recording alone (host CPU, medians of instances one at a time): the measured variant's callback and a
    // captureless one.
    {
      std::vector<double> rec_capture, rec_plain;
      for (int i = 0; i < std::max(o.batches, 5); ++i) {
        for (int plain = 0; plain < 2; ++plain) {
          comm.barrier();
          const double c0 = thread_cpu_us();
          for (int k = 0; k < sh.bucket_ops; ++k) {
            if (plain) {
              bucketer.reduce_scatter_async(in + k * n * c * es, c, dt, op, [](const void*, size_t) {});
            } else {
              record(k);
            }
          }
          (plain ? rec_plain : rec_capture).push_back(thread_cpu_us() - c0);
          bucketer.flush();
        }
      }
      if (me == 0) {
        std::printf(
            "# bucketer recording of %d calls (host CPU, medians): %.1f us with the capturing callback, %.1f us "
            "captureless\n",
            sh.bucket_ops, median(rec_capture), median(rec_plain));
        std::fflush(stdout);
      }
    }
    bucketer.teardown();
    comm.free(out);
    comm.free(in);
  }
  return wrong;
}

}  // namespace symcomm::bench::group

namespace symcomm::bench {

long long run_group_bench(Communicator& comm, const BenchOptions& o, Reporter& rep) {
#if defined(SYMCOMM_BENCH_CUDA)
  if (comm.backend() == BackendKind::kCuda) return group::run_cuda_patterns(comm, o, rep);
#endif
  return group::run_host_patterns(comm, o, rep);
}

}  // namespace symcomm::bench
