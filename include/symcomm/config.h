#pragma once
/// \file config.h
/// Every tunable of symcomm lives in one typed struct. Config::from_env() fills it from the SYMCOMM_*
/// environment variables (one table in src/core/config.cc; `symcomm-run --help-env` prints it); a bad value
/// is an Error(kInvalidArgument) naming the variable. Tests build a Config directly instead of touching the
/// environment.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace symcomm {

enum class LogLevel : uint8_t { kOff, kError, kWarn, kInfo, kDebug };

/// When the CUDA backend creates its NCCL communicator (used where select() prefers NCCL, and as the whole
/// path where the GPUs lack NVLink peer access).
/// - kEager: with the communicator (creation fails over to "no NCCL" consistently on every rank).
/// - kLazy: at the first collective that runs through NCCL, on every rank at once (ranks select the same
///   algorithm for the same collective). A communicator that never uses NCCL never pays for it: NCCL 2.28
///   takes ~15-40 ms to create a communicator and ~1 s to tear one down (its service threads poll every
///   500 ms; docs/reliability.md). That first collective must not be captured in a CUDA graph (an Error of
///   kind kUnsupported says so); where the GPUs lack NVLink peer access NCCL is created eagerly anyway.
/// - kOff: never; select() uses symcomm's kernels only.
enum class NcclInit : uint8_t { kEager, kLazy, kOff };

/// Thresholds used by the pure selection function (src/algos/select.cc). Each field documents where its
/// default was measured. The CUDA defaults are the 2-rank measurements. A communicator resolves the Tuning it
/// uses once, at creation (NOTE [tuning precedence] in src/core/tuning_file.cc): a field set explicitly
/// (Config::tuning_explicit) wins over the entry of a tuning file (Config::tuning_file) for its world size and
/// GPU, which wins over the values compiled in for its world size (CUDA; table in select.cc, NOTE [measured CUDA
/// thresholds]), which win over these defaults. Communicator::config() shows the result.
///
/// A field whose comment gives a range accepts only values in it: validate() (called by Config::from_env()
/// and Communicator::create()) refuses any other with Error(kInvalidArgument) naming the field, its variable
/// and the range; nothing is clamped silently. The byte thresholds take any value (0 and SIZE_MAX mean never
/// and always).
struct Tuning {
  /// Host backend: all-reduce payloads up to this many bytes use one-shot, larger ones two-shot.
  size_t host_one_shot_max_bytes = 64 * 1024;
  /// CUDA backend: all-reduce payloads up to this many bytes use one-shot. Measured on 2 x H200
  /// (tools/gpu/check.sh / tools/gpu/sweep.sh, bf16 sum, CUDA graph, kernel end without fences: NOTE [frame end
  /// without fences]), one-shot vs two-shot in us: one-shot ahead at 4 MB in four runs (18.70 vs 19.30; 18.55
  /// vs 19.26; 18.52 vs 19.63; 18.68 vs 19.80), two-shot ahead at 16 MB (57.96 vs 63.76).
  size_t cuda_one_shot_max_bytes = 4 << 20;
  /// CUDA backend: all-reduce payloads up to this many bytes use two-shot; larger ones go to NCCL when
  /// NCCL is available (two-shot otherwise).
  size_t cuda_two_shot_max_bytes = SIZE_MAX;
  /// CUDA two-shot all-reduce with its output in the symmetric heap: from this many bytes on, the input's
  /// shards are pushed through staging and the results pushed into the peers' outputs (remote stores only)
  /// instead of pulling the peers' inputs (NOTE [two-shot push to output]); SIZE_MAX = never.
  /// Measured on 2 x H200 (tools/gpu/sweep.sh, bf16 sum, CUDA graph, 16 MB staging, us, pull /
  /// push): 4 MB 19.26 / 19.62, 16 MB 58.07 / 56.36, 64 MB 207.75 / 200.15, 256 MB 803.19 / 766.64.
  size_t cuda_two_shot_push_min_bytes = 8 << 20;
  /// CUDA two-shot all-reduce: most blocks (0 or 1-256: the signal pad's block slots, device::kMaxBlocks; 512
  /// threads each, one SM each at its register use); 0 = one per SM of the ranks' smallest GPU (132 on an
  /// H100/H200; more than 256 SMs would be capped at 256).
  size_t cuda_two_shot_max_blocks = 0;
  /// CUDA two-shot all-reduce (with barriers): payload bytes per block before another block is added (16 or
  /// more), up to cuda_two_shot_max_blocks. Measured on 4 x H100 (symcomm-bench --algo two_shot, 4 ranks, bf16
  /// sum, CUDA graph, LL128 two-shot off, us at 1 / 4 / 16 / 64 MB): 64 KB 14.47 / 29.31 / 92.53 / 324.81;
  /// 32 KB 14.37 / 30.20 / 92.76 / 324.79; 16 KB 14.67 / 30.62 / 92.56 / 324.99; 64 KB with 256 blocks 14.50 /
  /// 28.84 / 95.98 / 327.23: within noise, the grid is not what limits it.
  size_t cuda_two_shot_block_bytes = 64 << 10;
  /// CUDA direct (staged or zero-copy) all-gather, reduce-scatter and all-to-all: bytes of one rank's block per
  /// GPU block before another is added (16 or more), and the most blocks (1-256, the signal pad's block slots).
  /// Measured on 4 x H100 (symcomm-bench, 4 ranks, bf16 sum, CUDA graph, LL off, us at 256 KB / 1 / 4 / 16 /
  /// 64 MB of all-gather output, reduce-scatter input): all-gather 64 KB x 128 blocks 13.40 / 14.44 / 18.87 /
  /// 45.42 / 155.32, 16 KB 10.33 / 11.30 / 20.18 / 46.21 / 154.79, 8 KB 9.65 / 11.22 / 18.77 / 45.84 / 155.14;
  /// reduce-scatter 64 KB 24.57 / 25.53 / 27.12 / 54.02 / 167.15, 16 KB 13.16 / 14.23 / 21.49 / 51.44 / 167.28,
  /// 8 KB 11.33 / 13.54 / 23.72 / 52.42 / 166.61; 16 KB x 64 blocks lost 8% at 64 MB.
  size_t cuda_direct_block_bytes = 16 << 10;
  size_t cuda_direct_max_blocks = 128;
  /// CUDA backend: payloads at least this large go to NCCL when it is available (SIZE_MAX = never: on
  /// 2 x H200, symcomm's all-reduce beat every NCCL mode at every size from 4 KB to 256 MB).
  size_t cuda_nccl_min_bytes = SIZE_MAX;
  /// CUDA backend: non-empty all_gather / reduce_scatter / all_to_all / broadcast with at most this many bytes
  /// per rank go to NCCL when it is available and low contention was not asked for; 0 = never. Measured on
  /// 2 x H200 (tools/gpu/check.sh, bf16, 4 KB-1 MB, symcomm's NCCL communicator nonblocking: NOTE [settling
  /// NCCL calls]): an eager collective sent to NCCL took 47-95 us against 7.6-12.0 us for the direct kernels,
  /// while in a CUDA graph the direct kernels were 0.88-1.25x NCCL's time (all-gather 5.9-9.3 us vs
  /// 5.6-10.6 us).
  size_t cuda_direct_nccl_max_bytes = 0;
  /// CUDA LL all-reduce (one-shot up to 1 MB): 8-byte chunks each thread carries before another block of 512
  /// threads is added (1-64), and the most blocks (1-1024) (NOTE [LL lines]). Measured on 2 x H200 (bf16
  /// sum, CUDA graph, µs at 4 KB / 16 KB / 64 KB / 256 KB / 1 MB): 1 chunk, 128 blocks: 2.83 / 3.73 / 4.05 / 5.08 /
  /// 9.68; 4 chunks, 64 blocks: 2.78 / 4.25 / 5.32 / 6.43 / 9.68; 2 chunks: in between.
  size_t cuda_ll_chunks_per_thread = 1;
  size_t cuda_ll_max_blocks = 128;
  /// CUDA LL all-reduce: threads per block (a multiple of 32, 32-512). Measured on 2 x H200
  /// (tools/gpu/sweep.sh, bf16 sum, CUDA graph, us at 4 KB / 16 KB / 64 KB / 256 KB / 1 MB): 512 threads,
  /// 128 blocks: 2.81 / 3.58 / 3.95 / 5.06 / 9.60 (1 MB: staged); 256 x 256: 3.26 / 3.53 / 3.99 / 5.12;
  /// 128 x 512: 3.19 / 3.58 / 4.00 / 5.21; 64 x 1024: 3.24 / 3.70 / 4.05 / 5.20; LL at 1 MB (128 x 1024): 10.81.
  size_t cuda_ll_block_threads = 512;
  /// CUDA one-shot all-reduce: payloads up to this many bytes (0-1M, the LL buffer) use the LL kernel, larger
  /// ones the staged one-shot (the buffer holds 1 MB less an 8-byte header; NOTE [LL threshold] in
  /// src/backends/cuda/cuda_backend_cuda.h). LL won at 4 KB-256 KB and lost at 1 MB (10.81 vs 9.25-9.60 us, same sweep
  /// as cuda_ll_block_threads).
  size_t cuda_ll_max_bytes = 512 << 10;
  /// CUDA all-gather, reduce-scatter and all-to-all blocks, and broadcast payloads (direct algorithm), of at
  /// most this many bytes (0-1M) use the LL kernels (NOTE [LL all-gather and reduce-scatter], NOTE [LL
  /// broadcast]; capped by the 1 MB LL buffer), larger ones the direct kernels; 0 = never. Measured on 2 x
  /// H200 (tools/gpu/sweep.sh, bf16, CUDA graph, bench sizes 4 KB-1 MB, i.e. blocks of 2-512 KB): LL all-gather
  /// 2.73-6.50 us against the direct kernels' 5.95-9.28 us, reduce-scatter 2.75-6.46 against 6.38-10.29,
  /// broadcast 2.77-4.05 against 5.88-8.70 (4-256 KB payloads). Blocks between 512 KB and the LL capacity are
  /// not measured; the default equals cuda_ll_max_bytes, the LL all-reduce's range.
  size_t cuda_ll_gather_max_bytes = 512 << 10;
  /// CUDA staged one-shot all-reduce: payload bytes per block before another block is added (16 or more: one
  /// 16-byte vector), and the most blocks (1-256, the signal pad's block slots, device::kMaxBlocks). Measured
  /// on 2 x H200 (tools/gpu/sweep.sh, bf16 sum, CUDA graph, us at 64 KB / 256 KB / 1 MB, LL off): 16 KB x 32
  /// blocks 6.45 / 7.04 / 9.60; 8 KB x 128: 6.14 / 6.99 / 9.25; 4 KB x 128: 6.27 / 6.80 / 9.33.
  size_t cuda_one_shot_block_bytes = 8 << 10;
  size_t cuda_one_shot_max_blocks = 128;
  /// CUDA one-shot all-reduce: payloads above cuda_ll_max_bytes and up to this many bytes (0-4M) use the LL128
  /// kernel (120 bytes of payload per 128-byte line, capped by its buffer, 4 MB; NOTE [LL128 lines] in
  /// src/algos/cuda_all_reduce_ll.cu), larger ones the staged one-shot. 0 = never. Measured on
  /// 2 x H200 (tools/gpu/sweep.sh, bf16 sum, CUDA graph, us at 256 KB / 1 MB / 4 MB): LL128 4.69 / 7.48 / 18.72
  /// (LL off), staged 4.79 / 8.88 / 18.72, LL 4.75 at 256 KB; LL128 with 64 blocks 18.35 at 4 MB but 9.23 at 1 MB.
  size_t cuda_ll128_max_bytes = 2 << 20;
  /// CUDA LL128 all-reduce: lines each 8-lane group carries before another block of 512 threads is added
  /// (1-64), and the most blocks (1-1024).
  size_t cuda_ll128_lines_per_group = 1;
  size_t cuda_ll128_max_blocks = 128;
  /// CUDA two-shot all-reduce: payloads up to this many bytes (0-16M) use the LL128 two-shot kernel (NOTE
  /// [LL128 two-shot] in src/algos/cuda_all_reduce_ll.cu: no barrier, the arrival flags in the lines; capped by
  /// the LL128 buffer, world_size / 2 x 4 MB), larger ones the two-shot kernels with barriers. 0 = never (the
  /// default at 2 ranks, where the one-shot moves the same bytes with one latency less; 3 or more ranks:
  /// NOTE [measured CUDA thresholds] in src/algos/select.cc). Its blocks follow cuda_ll128_lines_per_group and
  /// cuda_ll128_max_blocks, counting positions (lines of one shard).
  size_t cuda_ll128_two_shot_max_bytes = 0;
  /// CUDA all-gather and all-to-all blocks above the LL kernels' range (cuda_ll_gather_max_bytes) and up to this
  /// many bytes (0-4M, the LL128 buffer) use the LL128 kernel (NOTE [LL128 all-gather and reduce-scatter] in
  /// src/algos/cuda_all_reduce_ll.cu), larger ones the direct kernels; 0 = never (the default; the measured tables
  /// set it: NOTE [measured CUDA thresholds] in src/algos/select.cc). Broadcast stays on LL or the direct kernel.
  size_t cuda_ll128_gather_max_bytes = 0;
  /// The same bound for reduce-scatter blocks, whose direct kernel reads where the all-gather's writes, so that
  /// the two cross over at different sizes (1 MB blocks at 4 ranks on 4 x H100: reduce-scatter LL128 19.0 us
  /// against direct 21.3, all-gather LL128 20.1 against direct 18.1). A tuning file entry that sets only
  /// cuda_ll128_gather_max_bytes gives reduce-scatter that value too.
  size_t cuda_ll128_reduce_scatter_max_bytes = 0;
  /// CUDA one-shot all-reduces (LL, LL128, staged): launched with programmatic dependent launch (1) so that
  /// back-to-back kernels overlap their launch with the previous kernel's tail (NOTE [PDL] in
  /// src/algos/cuda_common.cuh); 0 = off (0 or 1).
  size_t cuda_pdl = 1;

  /// Throws Error(kInvalidArgument) for the first field outside its range, naming the field, its SYMCOMM_*
  /// variable, the value and the range (NOTE [tuning ranges] in src/core/config.cc).
  void validate() const;
};

struct Config {
  /// Deadline of every wait (host waits, device spin loops, store requests).
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  /// Bytes of symmetric heap each rank reserves for alloc() (host backend: virtual, committed on touch).
  size_t heap_bytes = size_t{1} << 30;
  /// Host backend: bytes of staging memory per rank used when a collective's buffers are not in the
  /// symmetric heap. Large collectives are processed in rounds of at most half of this, so a round's staged data
  /// stays in the cores' caches while the peers read it. Measured on the CI machine (2 cores of an AMD EPYC VM,
  /// 1 MB L2 per core, 32 MB L3; 2 ranks, float32 sum, ordinary buffers, `symcomm-bench --backend host -c
  /// all_reduce -b 1M -e 64M -f 4 -w 5 -n 20 --batches 5 --extra plain`, median of 5 runs, us at 1 / 4 / 16 /
  /// 64 MB): 16 MB 58.3 / 295.3 / 2395.6 / 8955.1, 2 MB 52.9 / 208.7 / 1746.1 / 7601.0, 1 MB 61.0 / 223.3 /
  /// 1737.7 / 7776.6; heap buffers (zero-copy, rounds alike) within noise of each other.
  size_t scratch_bytes = size_t{2} << 20;
  /// CUDA backend: the same, in device memory (also the copy engine's staging window). Each round of a
  /// staged kernel ends in a barrier, so larger rounds cost fewer barriers: measured on 2 x H200
  /// (tools/gpu/sweep.sh, bf16 sum, CUDA graph; NOTE [two-shot push to output]).
  size_t cuda_scratch_bytes = size_t{128} << 20;
  /// Host backend: bytes of one point-to-point staging chunk (rounded up to 4 KiB). Each ordered pair of ranks has
  /// two in the sender's memory (committed on touch): what a send may leave staged for its receiver, and the round
  /// size of larger messages (Communicator::send(); NOTE [point-to-point] in src/backends/host/host_p2p.cc).
  /// Measured on the 2-core CPU machine (2 ranks, uint8, median of 15 one-way sends, other builds running): 16 MiB
  /// took 1.4-1.6 ms with 1 MiB chunks, 2.6-2.8 ms with 256 KiB, 2.8-10.8 ms with 64 KiB; 1 MiB took 52 us,
  /// 104-279 us, 127-672 us.
  size_t p2p_chunk_bytes = size_t{1} << 20;
  /// Log verbosity (stderr).
  LogLevel log_level = LogLevel::kWarn;
  /// Exchange each collective's arguments through the store before running it and report mismatches
  /// field by field (slow; for debugging).
  bool debug_checks = false;
  /// How many recent operations each communicator remembers for the record written on its first fatal error.
  int op_history = 64;
  /// Directory of the operation record files: on a communicator's first fatal error (dead peer, timeout,
  /// mismatch, abort) each rank logs a short record (the error, the operation in flight, the three before it,
  /// the states of the rest) and writes every remembered operation to a file here, named after the
  /// communicator, the rank and the process id. Empty: $TMPDIR, else /tmp. The directory must exist. Written
  /// only when the error is logged (log level error or more verbose).
  std::string trace_dir;
  /// CUDA backend: when its NCCL communicator is created (NcclInit). Must be equal on all ranks.
  NcclInit nccl = NcclInit::kEager;
  /// CUDA backend, for testing where there are fewer GPUs than ranks: ranks may share a GPU (the default
  /// device becomes the local rank modulo the visible GPUs) and symcomm's kernels then run over the ranks'
  /// mappings of that GPU's memory. Slow: the GPU time-slices between the ranks' processes, so every wait
  /// for a peer lasts a time slice. NCCL is never created (it refuses two ranks on one GPU). Must be equal
  /// on all ranks.
  bool shared_gpu = false;
  /// CUDA backend, testing only: the device sequence counter's first value, and how far behind it every
  /// signal slot starts (NOTE [signal refresh] in include/symcomm/device/signal.h): lets a test reach a
  /// counter's crossing, and slots as stale as the refresh allows, without running 2^28 collectives first.
  /// A lag of 2^31 or more is refused (those slots would read as already reached). Must be equal on all ranks.
  uint32_t debug_seq_start = 0;
  uint32_t debug_signal_lag = 0;
  Tuning tuning;
  /// The Tuning fields set explicitly, by their names in the config table ("cuda_one_shot_max_bytes"): neither
  /// a tuning file nor the compiled-in per-world-size values replace them (NOTE [tuning precedence]).
  /// from_env() adds the field of every SYMCOMM_* tuning variable it reads. In a Config built in code, a field
  /// whose value differs from Tuning's default counts as set too; name a field here to keep a value equal to
  /// its default. An unknown name is refused at creation (kInvalidArgument).
  std::set<std::string, std::less<>> tuning_explicit;
  /// A tuning file (JSON written by symcomm-tune; docs/tuning.md), read by every communicator at creation;
  /// empty: none. Its entry for the communicator's world size and GPU ("host" on the host backend) sets the
  /// fields not set explicitly. A file that cannot be read or parsed, or holds a value outside its field's
  /// range, fails the creation on every rank with kInvalidArgument naming the file. The ranks must end up with
  /// the same Tuning (NOTE [configuration agreement]); the paths may differ.
  std::string tuning_file;
  /// A topology file (JSON; docs/design/topology.md) giving the links between the ranks, read by every
  /// communicator at creation; empty: every pair linked (the CUDA backend: the links it detects). Where it does
  /// not link every pair, all-reduces, all-gathers and reduce-scatters run the schedule that uses only its links
  /// (hybrid cube mesh, ring), whatever algorithm is asked for (CUDA: except NCCL); a topology no schedule serves
  /// sends them to NCCL (CUDA, where it is available and no symcomm algorithm is asked for) or fails them with
  /// kUnsupported. On the CUDA backend the file restricts GPUs that reach each other (every pair NVLink, or ranks
  /// sharing a GPU); elsewhere NCCL runs them. A file that cannot be read or parsed, or that names another world
  /// size, fails the creation on every rank with kInvalidArgument; ranks whose files describe different links
  /// fail it with kMismatch.
  std::string topology_file;

  /// Read SYMCOMM_* variables over the defaults. Throws Error(kInvalidArgument) on a malformed value or one
  /// outside its range (Tuning::validate()).
  static Config from_env();
  /// One line per variable: name, current default, meaning.
  static std::string env_help();
  /// Every variable's name and this configuration's value of it, as the environment would spell it, in the
  /// table's order.
  std::vector<std::pair<std::string, std::string>> settings() const;
};

}  // namespace symcomm
