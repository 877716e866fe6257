// --extra group / --extra bucket on the CUDA backend: symcomm grouped / one by one / flattened /
// bucketed against NCCL grouped (ncclGroupStart/End), one by one and flattened, in one run. symcomm's buffers
// are slabs of its symmetric heap; NCCL's are cudaMalloc'ed. GPU time: events around `iters` pattern
// instances on one stream; CPU time: thread CPU time of the issuing loop (no synchronisation inside).
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "cuda_util.h"
#include "group_bench.h"
#include "symcomm/bucketer.h"

namespace symcomm::bench::group {
namespace {

struct Slabs {
  char* sym_in = nullptr;
  char* sym_out = nullptr;
  char* nccl_in = nullptr;
  char* nccl_out = nullptr;
};

void upload_inputs(char* dst, DataType dt, size_t count, int rank) {
  std::vector<uint8_t> host(count * dtype_size(dt));
  fill_host(host.data(), dt, 0, count, rank);
  BENCH_CUDA(cudaMemcpy(dst, host.data(), host.size(), cudaMemcpyHostToDevice));
}

long long check(const char* out, DataType dt, size_t count, int world, const std::function<size_t(size_t)>& in_index) {
  std::vector<uint8_t> host(count * dtype_size(dt));
  BENCH_CUDA(cudaMemcpy(host.data(), out, host.size(), cudaMemcpyDeviceToHost));
  return count_wrong(host.data(), dt, count, world, in_index);
}

}  // namespace

long long run_cuda_patterns(Communicator& comm, const BenchOptions& o, Reporter& rep) {
  const bool do_group = wants(o, "group"), do_bucket = wants(o, "bucket");
  const int n = comm.world_size(), me = comm.rank();
  const DataType dt = o.dtype;
  const ReduceOp op = o.op;
  const size_t es = dtype_size(dt);
  const ncclDataType_t nt = nccl_type(dt);
  const ncclRedOp_t no = nccl_op(op);
  const Shapes sh;
  BENCH_CUDA(cudaSetDevice(comm.device()));
  ncclComm_t nccl = make_nccl_comm(comm);
  cudaStream_t s;
  BENCH_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t a, b;
  BENCH_CUDA(cudaEventCreate(&a));
  BENCH_CUDA(cudaEventCreate(&b));
  BatchClock clock{.start =
                       [&] {
                         comm.barrier({.stream = s});
                         BENCH_CUDA(cudaEventRecord(a, s));
                       },
                   .stop =
                       [&] {
                         BENCH_CUDA(cudaEventRecord(b, s));
                         BENCH_CUDA(cudaEventSynchronize(b));
                         float ms = 0;
                         BENCH_CUDA(cudaEventElapsedTime(&ms, a, b));
                         return ms * 1000.0;
                       }};
  const CollOptions co{.stream = s};
  long long wrong = 0;
  rep.header("symcomm-bench --extra group/bucket, cuda backend, " + std::to_string(n) + " ranks, " +
             std::string(to_string(dt)));

  if (do_group) {
    const size_t c = sh.group_tensor_bytes / es, total = c * sh.group_tensors;
    Slabs m;
    m.sym_in = static_cast<char*>(comm.alloc(total * es));  // in place: 512 MB
    BENCH_CUDA(cudaMalloc(&m.nccl_in, total * es));
    auto tensor = [&](char* base, int k) { return base + k * c * es; };
    std::vector<Variant> vs;
    vs.push_back({"symcomm_grouped", sh.group_tensors, [&] {
                    comm.group_start();
                    for (int k = 0; k < sh.group_tensors; ++k)
                      comm.all_reduce(tensor(m.sym_in, k), tensor(m.sym_in, k), c, dt, op, co);
                    comm.group_end();
                  }});
    vs.push_back({"symcomm_one_by_one", sh.group_tensors, [&] {
                    for (int k = 0; k < sh.group_tensors; ++k)
                      comm.all_reduce(tensor(m.sym_in, k), tensor(m.sym_in, k), c, dt, op, co);
                  }});
    vs.push_back({"symcomm_flattened", 1, [&] { comm.all_reduce(m.sym_in, m.sym_in, total, dt, op, co); }});
    vs.push_back({"nccl_grouped", sh.group_tensors, [&] {
                    BENCH_NCCL(ncclGroupStart());
                    for (int k = 0; k < sh.group_tensors; ++k)
                      BENCH_NCCL(ncclAllReduce(tensor(m.nccl_in, k), tensor(m.nccl_in, k), c, nt, no, nccl, s));
                    BENCH_NCCL(ncclGroupEnd());
                  }});
    vs.push_back({"nccl_one_by_one", sh.group_tensors, [&] {
                    for (int k = 0; k < sh.group_tensors; ++k)
                      BENCH_NCCL(ncclAllReduce(tensor(m.nccl_in, k), tensor(m.nccl_in, k), c, nt, no, nccl, s));
                  }});
    vs.push_back(
        {"nccl_flattened", 1, [&] { BENCH_NCCL(ncclAllReduce(m.nccl_in, m.nccl_in, total, nt, no, nccl, s)); }});
    for (Variant& v : vs) {
      char* buf = v.name.rfind("nccl", 0) == 0 ? m.nccl_in : m.sym_in;
      upload_inputs(buf, dt, total, me);
      comm.barrier({.stream = s});
      v.issue();
      BENCH_CUDA(cudaStreamSynchronize(s));
      v.wrong = o.check && op == ReduceOp::kSum ? check(buf, dt, total, n, [](size_t i) { return i; }) : -1;
    }
    PatternSpec spec{.pattern = "group_all_reduce",
                     .backend = "cuda",
                     .reference = "symcomm_flattened",
                     .bytes = total * es,
                     .warmup = o.warmup,
                     .iters = o.iters,
                     .batches = o.batches};
    wrong += measure(spec, vs, clock, o, comm, rep);
    comm.free(m.sym_in);
    cudaFree(m.nccl_in);
  }
  if (do_bucket) {
    const size_t c = sh.bucket_out_bytes / es, total = c * sh.bucket_ops;
    Slabs m;
    m.sym_in = static_cast<char*>(comm.alloc(total * n * es));
    m.sym_out = static_cast<char*>(comm.alloc(total * es));
    BENCH_CUDA(cudaMalloc(&m.nccl_in, total * n * es));
    BENCH_CUDA(cudaMalloc(&m.nccl_out, total * es));
    ReduceScatterBucketer bucketer(comm);
    bool copy_results = false;
    auto in_k = [&](char* base, int k) { return base + k * n * c * es; };
    auto out_k = [&](char* base, int k) { return base + k * c * es; };
    // Records input k with a callback that copies its result out (when checking).
    auto record = [&](int k) {
      char* dst = out_k(m.sym_out, k);
      bucketer.reduce_scatter_async(
          in_k(m.sym_in, k), c, dt, op,
          [&, dst](const void* r, size_t cnt) {
            if (copy_results) BENCH_CUDA(cudaMemcpyAsync(dst, r, cnt * es, cudaMemcpyDeviceToDevice, s));
          },
          co);
    };
    std::vector<Variant> vs;
    vs.push_back({"symcomm_bucketer", sh.bucket_ops, [&] {
                    for (int k = 0; k < sh.bucket_ops; ++k) record(k);
                    bucketer.flush();
                  }});
    vs.push_back({"symcomm_grouped", sh.bucket_ops, [&] {
                    comm.group_start();
                    for (int k = 0; k < sh.bucket_ops; ++k)
                      comm.reduce_scatter(in_k(m.sym_in, k), out_k(m.sym_out, k), c, dt, op, co);
                    comm.group_end();
                  }});
    vs.push_back({"symcomm_one_by_one", sh.bucket_ops, [&] {
                    for (int k = 0; k < sh.bucket_ops; ++k)
                      comm.reduce_scatter(in_k(m.sym_in, k), out_k(m.sym_out, k), c, dt, op, co);
                  }});
    vs.push_back({"symcomm_flattened", 1, [&] { comm.reduce_scatter(m.sym_in, m.sym_out, total, dt, op, co); }});
    vs.push_back({"nccl_grouped", sh.bucket_ops, [&] {
                    BENCH_NCCL(ncclGroupStart());
                    for (int k = 0; k < sh.bucket_ops; ++k)
                      BENCH_NCCL(ncclReduceScatter(in_k(m.nccl_in, k), out_k(m.nccl_out, k), c, nt, no, nccl, s));
                    BENCH_NCCL(ncclGroupEnd());
                  }});
    vs.push_back({"nccl_one_by_one", sh.bucket_ops, [&] {
                    for (int k = 0; k < sh.bucket_ops; ++k)
                      BENCH_NCCL(ncclReduceScatter(in_k(m.nccl_in, k), out_k(m.nccl_out, k), c, nt, no, nccl, s));
                  }});
    vs.push_back(
        {"nccl_flattened", 1, [&] { BENCH_NCCL(ncclReduceScatter(m.nccl_in, m.nccl_out, total, nt, no, nccl, s)); }});
    upload_inputs(m.sym_in, dt, total * n, me);
    upload_inputs(m.nccl_in, dt, total * n, me);
    auto per_op = [&](size_t i) { return (i / c) * n * c + me * c + i % c; };
    for (Variant& v : vs) {
      char* out = v.name.rfind("nccl", 0) == 0 ? m.nccl_out : m.sym_out;
      BENCH_CUDA(cudaMemset(out, 0xff, total * es));
      comm.barrier({.stream = s});
      copy_results = true;
      v.issue();
      copy_results = false;
      BENCH_CUDA(cudaStreamSynchronize(s));
      const bool flat = v.name.find("flattened") != std::string::npos;
      v.wrong = !o.check || op != ReduceOp::kSum ? -1
                : flat                           ? check(out, dt, total, n, [&](size_t i) { return me * total + i; })
                                                 : check(out, dt, total, n, per_op);
    }
    PatternSpec spec{.pattern = "bucket_reduce_scatter",
                     .backend = "cuda",
                     .reference = "symcomm_flattened",
                     .bytes = total * n * es,
                     .warmup = o.warmup,
                     .iters = o.iters,
                     .batches = o.batches};
    wrong += measure(spec, vs, clock, o, comm, rep);
    // Where one bucketer instance's time goes (instances one at a time, medians): recording the calls (host
    // CPU, the GPU idle), the flush's host CPU (copy and reduce-scatter launches, callbacks), and the GPU time
    // from the flush's start to its end.
    {
      cudaEvent_t e1;
      BENCH_CUDA(cudaEventCreate(&e1));
      std::vector<double> rec, fl, gpu;
      for (int i = 0; i < std::max(o.batches, 5); ++i) {
        comm.barrier({.stream = s});
        BENCH_CUDA(cudaStreamSynchronize(s));
        const double c0 = thread_cpu_us();
        for (int k = 0; k < sh.bucket_ops; ++k) record(k);  // the measured variant's callback
        const double c1 = thread_cpu_us();
        BENCH_CUDA(cudaEventRecord(e1, s));
        bucketer.flush();
        BENCH_CUDA(cudaEventRecord(b, s));
        const double c2 = thread_cpu_us();
        BENCH_CUDA(cudaEventSynchronize(b));
        float ms = 0;
        BENCH_CUDA(cudaEventElapsedTime(&ms, e1, b));
        rec.push_back(c1 - c0);
        fl.push_back(c2 - c1);
        gpu.push_back(ms * 1000.0);
      }
      BENCH_CUDA(cudaEventDestroy(e1));
      if (me == 0) {
        std::printf(
            "# bucketer instance, one at a time (medians): record %.1f us CPU (%.3f per call), flush %.1f us "
            "CPU, flush start to end on the GPU %.1f us\n",
            median(rec), median(rec) / sh.bucket_ops, median(fl), median(gpu));
        std::fflush(stdout);
      }
    }
    BENCH_CUDA(cudaStreamSynchronize(s));
    bucketer.teardown();
    comm.free(m.sym_in);
    comm.free(m.sym_out);
    cudaFree(m.nccl_in);
    cudaFree(m.nccl_out);
  }
  comm.check();
  BENCH_CUDA(cudaDeviceSynchronize());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  ncclCommDestroy(nccl);
  cudaStreamDestroy(s);
  return wrong;
}

}  // namespace symcomm::bench::group
