// LL one-shot all-reduce, and LL all-gather, reduce-scatter, all-to-all and broadcast.
//
// NOTE [LL lines] A line is 16 bytes {data lo, seq, data hi, seq}, stored with one 16-byte volatile store
// into slot `rank` of every peer's LL buffer. The reader polls its own buffer with 16-byte volatile loads
// until both sequence words equal the op's sequence number: each 8-byte half {data, seq} is written
// atomically, so two matching words prove the whole line arrived (the scheme of NCCL's LL protocol). The
// sequence words are never data, so no data value can be mistaken for a flag (no sentinel). Sequence
// numbers come from DeviceState::seq (advanced by the kernel, so graph replays see fresh values); buffers
// alternate by seq parity: a rank can only write op k+2's lines after receiving the peer's op k+1 lines,
// which the peer sends after it finished reading op k's.
//
// NOTE [LL128 lines] Payloads above LL's range use 128-byte lines: 120 bytes of payload and, in the last 8
// bytes, the flag {seq, header}. The 8 lanes of a warp that own a line store their 16 bytes with one
// 16-byte volatile store instruction, i.e. one 128-byte write, and NVLink delivers the bytes of such a write
// in ascending address order, so the flag, last, arrives last (the premise of NCCL's LL128 protocol, which
// NCCL enables by default on NVLink from Volta on). The reader's warp polls its lines until every flag lane
// sees `seq`, then loads the lines once more: that second load comes after the flag was seen, so it returns
// the whole line even if a load can be served in pieces. A flag with this op's seq but another header is a
// peer running another all-reduce (count, dtype, op): kMismatch naming it. The lines live in their own area
// of the LL buffer (after LL's), so LL's sequence words are never LL128 payload and vice versa; the areas
// alternate by seq parity as LL's do (NOTE [LL lines]).
//
// NOTE [LL all-gather and reduce-scatter] The LL all-reduce's kernel also runs small all-gathers and
// reduce-scatters and all-to-alls (LLKind), which otherwise pay two barriers of the direct kernels.
// All-gather: every rank sends its input's chunks to every peer (as the all-reduce does) and stores each
// peer's chunk, and its own, at that rank's block of the output. Reduce-scatter: every rank sends chunk i of
// its input's block q to peer q only, and reduces, in rank order, its own block's chunk i with the chunks the
// peers sent it. All-to-all: sent as the reduce-scatter, stored as the all-gather. Each op still
// sends every peer its header line and waits for every peer's, so the argument of NOTE [LL lines] for reusing
// a parity's buffer holds for any sequence of LL ops, and two ranks running different LL ops at the same seq
// (kind, count, dtype, op) get kMismatch (the kind is part of the header). A thread handles the same chunk
// index of every block, loading them all before it stores any, so in-place use is safe.
#include <algorithm>

#include "algos/cuda_all_reduce_ll.h"
#include "algos/cuda_common.cuh"
#include "base/cuda_check.h"

namespace symcomm::detail::cuda {
namespace {

// Chunks whose lines one thread loads before waiting (an unroll factor). How many chunks a thread carries
// and how many blocks run are Tuning::cuda_ll_chunks_per_thread / cuda_ll_max_blocks (the launch below;
// measurements in config.h): more blocks with fewer chunks each won at 16-256 KB although the kernel then
// needs the inter-block counter update from 8 KB on.
constexpr int kBatch = 4;
/// The LL kernel's batch for up to kR ranks: its line loads in flight, kBatch x kR 16-byte lines, must stay in
/// registers. With 4 x 8 lines the 8-rank instance (also the one for 5-7 ranks) spills 600-1100 bytes per
/// thread (ptxas -v, sm_90, 512 threads) and takes ~11 us for 4 KB at one rank under ncu.
template <int kR>
inline constexpr int kLLBatch = kR <= 2 ? kBatch : 1;

template <class T>
union Pack8 {
  static constexpr int kN = 8 / sizeof(T);
  uint2 v;
  T e[kN];
};

__device__ __forceinline__ uint2 load8(const char* base, size_t i, size_t bytes, bool aligned) {
  const size_t off = i * 8;
  if (aligned && off + 8 <= bytes) return *reinterpret_cast<const uint2*>(base + off);
  uint8_t b[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) b[k] = off + k < bytes ? static_cast<uint8_t>(base[off + k]) : 0;
  uint2 r;
  memcpy(&r, b, 8);
  return r;
}

__device__ __forceinline__ void store8(char* base, size_t i, size_t bytes, bool aligned, uint2 v) {
  const size_t off = i * 8;
  if (aligned && off + 8 <= bytes) {
    *reinterpret_cast<uint2*>(base + off) = v;
    return;
  }
  uint8_t b[8];
  memcpy(b, &v, 8);
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    if (off + k < bytes) base[off + k] = static_cast<char>(b[k]);
  }
}

__device__ __forceinline__ void st_line(char* p, uint4 v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}
__device__ __forceinline__ uint4 ld_line(const char* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

/// Combines the ranks' 8-byte packs in rank order (the same order on every rank: bitwise-identical results).
template <class T, int kOp, int kR>
__device__ __forceinline__ uint2 reduce8(const Pack8<T>* vals, int n_ranks, ReduceOp op) {
  using E = Elem<T>;
  using A = typename E::Acc;
  Pack8<T> r;
#pragma unroll
  for (int k = 0; k < Pack8<T>::kN; ++k) {
    A acc = E::load(vals[0].e[k]);
#pragma unroll
    for (int q = 1; q < kR; ++q) {
      if (q < n_ranks) acc = combine<kOp>(acc, E::load(vals[q].e[k]), op);
    }
    r.e[k] = E::store(finish<kOp>(acc, n_ranks, op));
  }
  return r.v;
}

__device__ __forceinline__ bool aligned8(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 7) == 0; }

/// Chunks base, base + stride, ... (kN of them, those below nchunks) of `in`, all loads in flight at once.
template <int kN>
__device__ __forceinline__ void load_batch(uint2 (&own)[kN], const char* in, size_t base, size_t stride, size_t nchunks,
                                           size_t bytes, bool aligned) {
#pragma unroll
  for (int u = 0; u < kN; ++u) {
    const size_t i = base + u * stride;
    if (i < nchunks) own[u] = load8(in, i, bytes, aligned);
  }
}

/// NOTE [LL flag zero] The flag words of LL and LL128 lines are the op's sequence number, except that 0 is
/// sent as 1: the LL buffer starts zeroed, so at the one op in 2^32 whose sequence number is 0 (the counter
/// wraps), lines never written before would otherwise read as arrived, and the op would fail with a false
/// kMismatch (the zeroed header line read as arrived, its header as another op's). Every LL and LL128 case of
/// `Cases/GpuSequenceWrap.*` (tests/gpu/sequence_test.cc, the counter started just below the wrap with
/// Config::debug_seq_start) fails that way with the substitution removed (sabotage case `ll-flag-zero`). The
/// substitute is odd because the op at 0 uses the parity-0 area (seq & 1), where every other op's flag is even:
/// so it is sent again only 2^32 advances later, like any flag. An even substitute such as 2^31 would not do:
/// the op at 2^31 also sends it in that area, so a line of that op left unwritten for 2^31 advances would read
/// as arrived at 0. Sequence numbers themselves (parity areas, announcements, error reports) are not
/// substituted.
__device__ __forceinline__ uint32_t ll_flag(uint32_t seq) { return seq != 0 ? seq : 1u; }

/// One LL op's lines: line `line` of the slot of rank `from` in rank `owner`'s buffer; line 0 carries the
/// op's header, line i + 1 chunk i.
struct LLLines {
  const DeviceComm& c;
  size_t region;  ///< this op's parity area (NOTE [LL lines])
  uint32_t seq;
  uint32_t flag;  ///< ll_flag(seq), the lines' sequence words
  uint64_t header;

  __device__ __forceinline__ char* at(int owner, int from, size_t line) const {
    return c.ll[owner] + region + from * c.ll_slot_bytes + line * 16;
  }
  /// Thread 0: this rank's header line to every peer.
  __device__ __forceinline__ void send_header() const {
    const uint4 line = make_uint4(static_cast<uint32_t>(header), flag, static_cast<uint32_t>(header >> 32), flag);
    for (int q = 0; q < c.world_size; ++q) {
      if (q != c.rank) st_line(at(q, c.rank, 0), line);
    }
  }
  __device__ __forceinline__ bool arrived(const uint4& line) const { return line.y == flag && line.w == flag; }

  /// Spins until `line` (loaded from `src`, sent by `peer`) carries this op's flag in both words; false, after
  /// recording the error, if the wait gives up.
  __device__ __forceinline__ bool wait(const char* src, uint4& line, int peer, uint64_t deadline) const {
    for (uint32_t spins = 0; !arrived(line); line = ld_line(src)) {
      if (++spins % device::kPollInterval == 0 &&
          device::poll_give_up(c, peer, seq, deadline, device::announcement(seq, header)))
        return false;
    }
    return true;
  }

  /// NOTE [LL concurrent polling] Waits until every line k of `lines` whose bit is set in `pending` (loaded
  /// from src(k), sent by peer(k)) carries this op's flag in both words; false, after recording the error, if
  /// the wait gives up. Each spin reloads every line still missing at once, so a thread waiting for n peers
  /// pays about one load latency per spin, not n, as it did reloading one line at a time. The lines stay in
  /// registers (the callers' loops over k unroll). Measured on 4 x H200 (every pair NV18; symcomm-tune, bf16,
  /// CUDA graph, medians of two runs of each build on one machine, us, one line at a time -> together): LL
  /// all-reduce 4 KB 4.28 -> 3.44, 64 KB 5.54 -> 4.59, 256 KB 9.57 -> 9.23; LL all-gather 4 KB blocks
  /// 4.86 -> 3.69; LL reduce-scatter 4.57 -> 3.69; LL128 all-reduce 4 KB 5.68 -> 4.31, 256 KB 8.04 -> 7.21.
  /// With one peer there is nothing to overlap: waiting together cost the 2-rank LL kernels 5-11% at 4-64 KB
  /// (same runs), so their instance (kR = 2) waits for each line in turn; the 2-rank LL128 kernel, which
  /// waits together, measured within 4% either way.
  template <int kN, class Src, class Peer>
  __device__ __forceinline__ bool wait_all(uint4 (&lines)[kN], uint32_t pending, Src src, Peer peer,
                                           uint64_t deadline) const {
    uint32_t spins = 0;
    for (;;) {
#pragma unroll
      for (int k = 0; k < kN; ++k) {
        if (((pending >> k) & 1) && arrived(lines[k])) pending &= ~(1u << k);
      }
      if (pending == 0) return true;
      if (++spins % device::kPollInterval == 0 &&
          device::poll_give_up(c, peer(__ffs(static_cast<int>(pending)) - 1), seq, deadline,
                               device::announcement(seq, header)))
        return false;
#pragma unroll
      for (int k = 0; k < kN; ++k) {
        if ((pending >> k) & 1) lines[k] = ld_line(src(k));
      }
    }
  }
  // NOTE [LL header line] Thread 0 compares the peers' header lines with its own once it has sent its first
  // lines. A peer running another LL op (kind, count, dtype, op, root) at the same seq sends lines
  // that look valid, so without this the ranks would use each other's bytes silently; with it both get
  // kMismatch, their outputs undefined. (Threads waiting for chunks a peer with a smaller count never sends
  // give up at their next poll, once thread 0 has recorded the error.) kR >= world size; from 3 ranks on the
  // header lines of all peers are polled together (NOTE [LL concurrent polling]).
  template <int kR>
  __device__ __forceinline__ bool headers_match(uint64_t deadline) const {
    if constexpr (kR <= 2) return headers_match_in_turn(deadline);
    uint4 lines[kR];
    uint32_t pending = 0;
    auto src = [&](int q) { return at(c.rank, q, 0); };
#pragma unroll
    for (int q = 0; q < kR; ++q) {
      if (q < c.world_size && q != c.rank) {
        lines[q] = ld_line(src(q));
        pending |= 1u << q;
      }
    }
    if (!wait_all(
            lines, pending, src, [](int q) { return q; }, deadline))
      return false;
#pragma unroll
    for (int q = 0; q < kR; ++q) {
      if (((pending >> q) & 1) &&
          (lines[q].x != static_cast<uint32_t>(header) || lines[q].z != static_cast<uint32_t>(header >> 32))) {
        device::report_error(c, device::DeviceError::kMismatch, q, seq);
        return false;
      }
    }
    return true;
  }
  /// The peers' header lines one after the other (as the 2-rank instances wait for their lines: NOTE [LL
  /// concurrent polling]).
  __device__ __forceinline__ bool headers_match_in_turn(uint64_t deadline) const {
    for (int q = 0; q < c.world_size; ++q) {
      if (q == c.rank) continue;
      const char* src = at(c.rank, q, 0);
      uint4 line = ld_line(src);
      if (!wait(src, line, q, deadline)) return false;
      if (line.x != static_cast<uint32_t>(header) || line.z != static_cast<uint32_t>(header >> 32)) {
        device::report_error(c, device::DeviceError::kMismatch, q, seq);
        return false;
      }
    }
    return true;
  }
};

template <class T, int kOp, int kR, LLKind kKind>
__global__ void __launch_bounds__(kThreads) all_reduce_ll_kernel(AllReduceLLParams p) {
  // kScatter: block q of the input goes to peer q (reduce-scatter, all-to-all); kGather: every rank's block is
  // stored at its place in the output (all-gather, all-to-all); otherwise the blocks are reduced.
  constexpr bool kScatter = kKind == LLKind::kReduceScatter || kKind == LLKind::kAllToAll;
  constexpr bool kGather = kKind == LLKind::kAllGather || kKind == LLKind::kAllToAll;
  constexpr int kB = kLLBatch<kR>;
  const DeviceComm& c = p.comm;
  const Frame f = frame_begin(c, p.header);
  if (f.failed) return;  // NOTE [failed communicator]
  const uint32_t seq = f.seq0 + 1;
  const int n_ranks = c.world_size, me = c.rank;
  const size_t bytes = p.count * sizeof(T);  // one rank's block (NOTE [LL all-gather and reduce-scatter])
  const size_t nchunks = div_up(bytes, 8);
  const size_t region = (seq & 1) * n_ranks * c.ll_slot_bytes;
  // This rank's own block: the reduce-scatter's and all-to-all's is block `me` of its input.
  const char* in = static_cast<const char*>(p.in) + (kScatter ? me * bytes : 0);
  char* out = static_cast<char*>(p.out);
  const bool in_al = aligned8(in);
  const bool out_al = aligned8(out);
  // The own block needs no store when the input already is it (all-gather or all-to-all in place).
  const bool own_in_place = kGather && in == out + me * bytes;
  const size_t tid = blockIdx.x * size_t{blockDim.x} + threadIdx.x, stride = size_t{gridDim.x} * blockDim.x;
  const LLLines ll{c, region, seq, ll_flag(seq), p.header};
  if (tid == 0) ll.send_header();

  // Per batch of kB chunks: load this rank's values (all loads in flight at once), send them to every
  // peer, issue the loads of the peers' lines, wait for them (from 3 ranks on all together: NOTE [LL
  // concurrent polling]), then reduce each chunk. The own values stay in registers for the reduction, so one
  // thread pays about one local and one NVLink latency per batch (a send-everything-first loop pays one local
  // load latency per chunk, twice). A thread waits only for lines its peers' threads of the same index send
  // before they wait themselves, so no cycle is possible.
  bool failed = false;
  for (size_t base = tid; base < nchunks && !failed; base += stride * kB) {
    uint2 own[kB];
    load_batch(own, in, base, stride, nchunks, bytes, in_al);
#pragma unroll
    for (int u = 0; u < kB; ++u) {
      const size_t i = base + u * stride;
      if (i >= nchunks) break;
      if constexpr (kScatter) {  // chunk i of block q goes to peer q; all loads first, then the stores
        uint2 block[kR];
#pragma unroll
        for (int q = 0; q < kR; ++q) {
          const char* src = static_cast<const char*>(p.in) + q * bytes;
          if (q < n_ranks && q != me) block[q] = load8(src, i, bytes, aligned8(src));
        }
#pragma unroll
        for (int q = 0; q < kR; ++q) {
          if (q < n_ranks && q != me)
            st_line(ll.at(q, me, i + 1), make_uint4(block[q].x, ll.flag, block[q].y, ll.flag));
        }
      } else {
        const uint4 line = make_uint4(own[u].x, ll.flag, own[u].y, ll.flag);
        for (int q = 0; q < n_ranks; ++q) {
          if (q != me) st_line(ll.at(q, me, i + 1), line);
        }
      }
    }
    // Thread 0 checks the header lines while the loads of its first data lines are in flight, except in the
    // 8-rank instance, where it checks them before issuing those loads so that the two sets of lines are never
    // in registers at once (with both, the instance spilled 48-144 bytes per thread at sm_90). Checking first
    // cost the 2-rank LL all-reduce of 4-64 KB 0.3-0.7 us in a CUDA graph (2 x H200).
    constexpr bool kHeaderFirst = kR > 4;
    // NOTE [LL concurrent polling]: from 3 ranks on; the 2-rank instance waits for each chunk's line in turn.
    constexpr bool kConcurrent = kR > 2;
    if (kHeaderFirst && base == 0 && !ll.headers_match<kR>(f.deadline)) {
      failed = true;
      break;
    }
    // Line u * kR + q: chunk base + u * stride from peer q.
    uint4 lines[kB * kR];
    uint32_t pending = 0;
    auto src = [&](int k) { return ll.at(me, k % kR, base + (k / kR) * stride + 1); };
#pragma unroll
    for (int u = 0; u < kB; ++u) {
#pragma unroll
      for (int q = 0; q < kR; ++q) {
        if (base + u * stride < nchunks && q < n_ranks && q != me) {
          lines[u * kR + q] = ld_line(src(u * kR + q));
          pending |= 1u << (u * kR + q);
        }
      }
    }
    if (!kHeaderFirst && base == 0) failed = !ll.headers_match<kR>(f.deadline);
    if (kConcurrent && !failed)
      failed = !ll.wait_all(
          lines, pending, src, [](int k) { return k % kR; }, f.deadline);
#pragma unroll
    for (int u = 0; u < kB; ++u) {
      const size_t i = base + u * stride;
      if (i >= nchunks || failed) break;
      if constexpr (!kConcurrent) {  // one peer: its lines of this chunk, one at a time
#pragma unroll
        for (int q = 0; q < kR; ++q) {
          const int k = u * kR + q;
          if (((pending >> k) & 1) && !ll.wait(src(k), lines[k], q, f.deadline)) failed = true;
        }
        if (failed) break;
      }
      Pack8<T> vals[kR];
#pragma unroll
      for (int q = 0; q < kR; ++q) {
        if (q >= n_ranks) break;
        const uint4& line = lines[u * kR + q];
        vals[q].v = q == me ? own[u] : make_uint2(line.x, line.z);
      }
      if constexpr (kGather) {
#pragma unroll
        for (int q = 0; q < kR; ++q) {
          if (q >= n_ranks || (q == me && own_in_place)) continue;
          char* dst = out + q * bytes;
          store8(dst, i, bytes, aligned8(dst), vals[q].v);
        }
      } else {
        store8(out, i, bytes, out_al, reduce8<T, kOp, kR>(vals, n_ranks, p.op));
      }
    }
  }
  frame_end(c, f, 1, 0, false);  // no block barriers: NOTE [signal refresh]
}

// NOTE [LL broadcast] The root sends its chunks to every peer (as the all-reduce sends its own) and copies
// them into its output; the others wait for the root's lines only and store them. Every rank still sends
// every peer its header line and waits for every peer's (NOTE [LL all-gather and reduce-scatter]), so the
// buffer-reuse argument of NOTE [LL lines] holds for the root too, which waits for nothing else, and ranks
// that disagree on the root (it is in the header) get kMismatch. Bytes only: count is in bytes.
// The broadcast's header check: the peers' header lines together from 3 ranks on (NOTE [LL concurrent polling]).
__device__ __forceinline__ bool broadcast_headers_match(const LLLines& ll, uint64_t deadline) {
  return ll.c.world_size <= 2 ? ll.headers_match_in_turn(deadline)
                              : ll.headers_match<device::kMaxDeviceRanks>(deadline);
}

__global__ void __launch_bounds__(kThreads) ll_broadcast_kernel(AllReduceLLParams p) {
  const DeviceComm& c = p.comm;
  const Frame f = frame_begin(c, p.header);
  if (f.failed) return;  // NOTE [failed communicator]
  const uint32_t seq = f.seq0 + 1;
  const int n_ranks = c.world_size, me = c.rank, root = p.root;
  const size_t bytes = p.count, nchunks = div_up(bytes, 8);
  const LLLines ll{c, (seq & 1) * n_ranks * c.ll_slot_bytes, seq, ll_flag(seq), p.header};
  const char* in = static_cast<const char*>(p.in);
  char* out = static_cast<char*>(p.out);
  const bool in_al = aligned8(in), out_al = aligned8(out);
  const bool copy_own = me == root && in != out;
  const size_t tid = blockIdx.x * size_t{blockDim.x} + threadIdx.x, stride = size_t{gridDim.x} * blockDim.x;
  if (tid == 0) ll.send_header();
  bool failed = false;
  for (size_t base = tid; base < nchunks && !failed; base += stride * kBatch) {
    if (me == root) {
      uint2 own[kBatch];
      load_batch(own, in, base, stride, nchunks, bytes, in_al);
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const size_t i = base + u * stride;
        if (i >= nchunks) break;
        const uint4 line = make_uint4(own[u].x, ll.flag, own[u].y, ll.flag);
        for (int q = 0; q < n_ranks; ++q) {
          if (q != me) st_line(ll.at(q, me, i + 1), line);
        }
        if (copy_own) store8(out, i, bytes, out_al, own[u]);
      }
      if (base == 0) failed = !broadcast_headers_match(ll, f.deadline);
      continue;
    }
    uint4 lines[kBatch];
    auto src = [&](int u) { return ll.at(me, root, base + u * stride + 1); };
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      if (base + u * stride < nchunks) lines[u] = ld_line(src(u));
    }
    if (base == 0) failed = !broadcast_headers_match(ll, f.deadline);  // thread 0, its first lines' loads in flight
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const size_t i = base + u * stride;
      if (i >= nchunks || failed) break;
      if (!ll.wait(src(u), lines[u], root, f.deadline)) {
        failed = true;
        break;
      }
      store8(out, i, bytes, out_al, make_uint2(lines[u].x, lines[u].z));
    }
  }
  frame_end(c, f, 1, 0, false);  // no block barriers: NOTE [signal refresh]
}

// ---- LL128 ---------------------------------------------------------------------------------------------

// A warp moves 4 lines at a time: lane l holds bytes [16 * (l % 8), +16) of line l / 8. The 8 lanes of a line
// carry 15 chunks of 8 payload bytes (chunks 2s and 2s + 1 in lane s < 7, chunk 14 in lane 7) and lane 7's
// last 8 bytes are the flag {seq, header} (NOTE [LL128 lines]).
constexpr size_t kLL128LineBytes = 128;
constexpr size_t kLL128LineData = 120;
constexpr int kLL128LanesPerLine = 8;
constexpr int kLL128ChunksPerLine = 15;
constexpr int kLL128LinesPerWarp = 32 / kLL128LanesPerLine;
// Lines each 8-lane group loads before waiting (an unroll factor, like kBatch).
constexpr int kLL128Batch = 2;
constexpr unsigned kFullWarp = 0xffffffffu;

/// One lane's view of an LL128 op: lane `sub` of the 8 that carry a line (NOTE [LL128 lines]), in this op's
/// parity area of the LL buffers, whose slots hold `slot_bytes` of lines each.
struct LL128Lane {
  const DeviceComm& c;
  size_t region;  ///< this op's parity area
  size_t slot_bytes;
  uint32_t seq;
  uint32_t flag;  ///< ll_flag(seq)
  uint32_t header;
  int lane;
  int sub;
  bool flag_lane;

  /// This lane's 16 bytes of line `line` (counted from the start of the area) in rank `owner`'s area.
  __device__ __forceinline__ char* at(int owner, size_t line) const {
    return c.ll[owner] + region + line * kLL128LineBytes + sub * 16;
  }
  /// This lane's 16 bytes of line `line` of the slot that holds what rank `from` sends (the one-shot's layout).
  __device__ __forceinline__ char* slot_at(int owner, int from, size_t line) const {
    return c.ll[owner] + region + from * slot_bytes + line * kLL128LineBytes + sub * 16;
  }
  /// The lane's 16 bytes of a line whose payload chunks are v[0] and v[1]; the flag lane carries the flag instead
  /// of v[1].
  __device__ __forceinline__ uint4 pack(const uint2 (&v)[2]) const {
    return flag_lane ? make_uint4(v[0].x, v[0].y, flag, header) : make_uint4(v[0].x, v[0].y, v[1].x, v[1].y);
  }
  /// Payload chunk h (0 or 1) of a line the lane loaded.
  __device__ __forceinline__ static uint2 half(const uint4& v, int h) {
    return h == 0 ? make_uint2(v.x, v.y) : make_uint2(v.z, v.w);
  }
  /// The lanes' own chunks of a line: chunk `ci` and, but in the flag lane, `ci + 1`; zeros where `valid` is
  /// false.
  __device__ __forceinline__ void load_own(uint2 (&v)[2], const char* in, size_t ci, size_t bytes, bool aligned,
                                           bool valid) const {
    v[0] = valid ? load8(in, ci, bytes, aligned) : make_uint2(0, 0);
    v[1] = valid && !flag_lane ? load8(in, ci + 1, bytes, aligned) : make_uint2(0, 0);
  }

  /// Waits, warp-wide, until every peer q whose bit is set in `pending` (the same in all 32 lanes) has delivered
  /// its line got[q], loaded from src(q); a lane's 8-lane group waits only for the peers whose bit is set in its
  /// `live` mask (the lines it carries). The lines of every peer still missing are reloaded on each spin (NOTE
  /// [LL concurrent polling]). False, in every lane, after recording the error, if a flag carries another op's
  /// header (kMismatch) or the wait gives up. The callers load the lines once more after it (NOTE [LL128 lines]).
  template <int kR, class Src>
  __device__ __forceinline__ bool wait(uint4 (&got)[kR], uint32_t pending, uint32_t live, Src src,
                                       uint64_t deadline) const {
    for (uint32_t spins = 0;;) {
#pragma unroll
      for (int q = 0; q < kR; ++q) {
        if (!((pending >> q) & 1)) continue;
        const bool mine = flag_lane && ((live >> q) & 1);
        const bool seen = mine && got[q].z == flag;
        const bool bad = seen && got[q].w != header;
        if (__any_sync(kFullWarp, bad)) {
          if (bad) device::report_error(c, device::DeviceError::kMismatch, q, seq);
          return false;
        }
        if (__all_sync(kFullWarp, seen || !mine)) pending &= ~(1u << q);
      }
      if (pending == 0) return true;
      const int waited = __ffs(static_cast<int>(pending)) - 1;
      if (++spins % device::kPollInterval == 0 &&
          __any_sync(kFullWarp,
                     lane == 0 && device::poll_give_up(c, waited, seq, deadline, device::announcement(seq, header))))
        return false;
#pragma unroll
      for (int q = 0; q < kR; ++q) {
        if ((pending >> q) & (live >> q) & 1) got[q] = ld_line(src(q));
      }
    }
  }
};

template <int kR>
__device__ __forceinline__ uint32_t peers_mask(int n_ranks, int me) {
  uint32_t m = 0;
#pragma unroll
  for (int q = 0; q < kR; ++q) {
    if (q < n_ranks && q != me) m |= 1u << q;
  }
  return m;
}

/// The reduction of chunk h of a line: this rank's `own` and the peers' lines `got`, in rank order.
template <class T, int kOp, int kR>
__device__ __forceinline__ uint2 reduce_line_half(const uint2& own, const uint4 (&got)[kR], int h, int n_ranks, int me,
                                                  ReduceOp op) {
  Pack8<T> vals[kR];
#pragma unroll
  for (int q = 0; q < kR; ++q) {
    if (q >= n_ranks) break;
    vals[q].v = q == me ? own : LL128Lane::half(got[q], h);
  }
  return reduce8<T, kOp, kR>(vals, n_ranks, op);
}

__device__ __forceinline__ LL128Lane ll128_lane(const DeviceComm& c, const AllReduceLL128Params& p, uint32_t seq) {
  const int lane = threadIdx.x % 32, sub = lane % kLL128LanesPerLine;
  return LL128Lane{c,
                   p.offset + (seq & 1) * c.world_size * p.slot_bytes,
                   p.slot_bytes,
                   seq,
                   ll_flag(seq),
                   p.header,
                   lane,
                   sub,
                   sub == kLL128LanesPerLine - 1};
}

// NOTE [LL128 all-gather and reduce-scatter] The LL128 one-shot kernel also runs all-gathers, reduce-scatters and
// all-to-alls whose blocks lie above LL's range (LLKind, as NOTE [LL all-gather and reduce-scatter] does on the LL
// lines): line i of what rank r sends peer q is line i of its input (all-gather) or of block q of its input
// (reduce-scatter, all-to-all), in slot r of q's area as the all-reduce's; the receiver stores each peer's line
// at that peer's block of the output (all-gather, all-to-all) or reduces the lines in rank order with its own
// block's (reduce-scatter). Every op still sends every peer each of its line positions and waits for each
// peer's, so the buffer-reuse argument of NOTE [LL lines] holds across any sequence of LL128 ops, and the kind is
// part of the header in the flags (kMismatch between kinds at one seq). The lanes of a line load every block's
// chunks of that line before storing any, so in-place use is safe.
template <class T, int kOp, int kR, LLKind kKind>
__global__ void __launch_bounds__(kThreads) all_reduce_ll128_kernel(AllReduceLL128Params p) {
  // kScatter: block q of the input goes to peer q; kGather: every rank's block is stored at its place in the
  // output; otherwise the blocks are reduced (NOTE [LL128 all-gather and reduce-scatter]).
  constexpr bool kScatter = kKind == LLKind::kReduceScatter || kKind == LLKind::kAllToAll;
  constexpr bool kGather = kKind == LLKind::kAllGather || kKind == LLKind::kAllToAll;
  const DeviceComm& c = p.comm;
  const Frame f = frame_begin(c, p.header);
  if (f.failed) return;  // NOTE [failed communicator]
  const int n_ranks = c.world_size, me = c.rank;
  const size_t bytes = p.count * sizeof(T);  // one rank's block
  const size_t nlines = div_up(bytes, kLL128LineData);
  const LL128Lane ll = ll128_lane(c, p, f.seq0 + 1);                              // NOTE [LL flag zero]
  const char* in = static_cast<const char*>(p.in) + (kScatter ? me * bytes : 0);  // this rank's own block
  char* out = static_cast<char*>(p.out);
  const bool in_al = aligned8(in), out_al = aligned8(out);
  // The own block needs no store when the input already is it (all-gather or all-to-all in place).
  const bool own_in_place = kGather && in == out + me * bytes;
  const int group = ll.lane / kLL128LanesPerLine;
  const size_t warp = (blockIdx.x * size_t{blockDim.x} + threadIdx.x) / 32;
  const size_t line_stride = size_t{gridDim.x} * blockDim.x / 32 * kLL128LinesPerWarp;  // lines per batch step
  const uint32_t peers = peers_mask<kR>(n_ranks, me);

  // Every loop bound and every break below is the same in all 32 lanes (warp-uniform), as the warp votes
  // and the one-instruction line stores require.
  bool failed = false;
  for (size_t base = warp * kLL128LinesPerWarp + group; base - group < nlines && !failed;
       base += line_stride * kLL128Batch) {
    uint2 own[kLL128Batch][2];
    bool valid[kLL128Batch];
#pragma unroll
    for (int u = 0; u < kLL128Batch; ++u) {
      const size_t line = base + u * line_stride;
      valid[u] = line < nlines;
      ll.load_own(own[u], in, line * kLL128ChunksPerLine + ll.sub * 2, bytes, in_al, valid[u]);
    }
    __syncwarp();  // the 8 lanes of a line store it with one instruction
#pragma unroll
    for (int u = 0; u < kLL128Batch; ++u) {
      if constexpr (kScatter) {  // line u of block q goes to peer q; all loads first, then the stores
        const size_t ci = (base + u * line_stride) * kLL128ChunksPerLine + ll.sub * 2;
        uint2 block[kR][2];
#pragma unroll
        for (int q = 0; q < kR; ++q) {
          const char* src = static_cast<const char*>(p.in) + q * bytes;
          if (q < n_ranks && q != me) ll.load_own(block[q], src, ci, bytes, aligned8(src), valid[u]);
        }
#pragma unroll
        for (int q = 0; q < kR; ++q) {
          if (q < n_ranks && q != me && valid[u]) st_line(ll.slot_at(q, me, base + u * line_stride), ll.pack(block[q]));
        }
      } else {
        const uint4 v = ll.pack(own[u]);
        for (int q = 0; q < n_ranks; ++q) {
          if (q != me && valid[u]) st_line(ll.slot_at(q, me, base + u * line_stride), v);
        }
      }
    }
    uint4 got[kLL128Batch][kR];
    auto load_lines = [&] {
#pragma unroll
      for (int u = 0; u < kLL128Batch; ++u) {
#pragma unroll
        for (int q = 0; q < kR; ++q) {
          if (((peers >> q) & 1) && valid[u]) got[u][q] = ld_line(ll.slot_at(me, q, base + u * line_stride));
        }
      }
    };
    load_lines();
    // Per line of the batch, wait until every peer's flag is seen, then load the lines once more.
#pragma unroll
    for (int u = 0; u < kLL128Batch; ++u) {
      auto src = [&](int q) { return ll.slot_at(me, q, base + u * line_stride); };
      if (!ll.wait(got[u], peers, valid[u] ? peers : 0, src, f.deadline)) {
        failed = true;
        break;
      }
    }
    if (failed) break;
    load_lines();
#pragma unroll
    for (int u = 0; u < kLL128Batch; ++u) {
      if (!valid[u]) continue;
      const size_t ci = (base + u * line_stride) * kLL128ChunksPerLine + ll.sub * 2;
      if constexpr (kGather) {
#pragma unroll
        for (int q = 0; q < kR; ++q) {
          if (q >= n_ranks || (q == me && own_in_place)) continue;
          char* dst = out + q * bytes;
          const bool dst_al = aligned8(dst);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            if (h == 1 && ll.flag_lane) break;
            store8(dst, ci + h, bytes, dst_al, q == me ? own[u][h] : LL128Lane::half(got[u][q], h));
          }
        }
      } else {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (h == 1 && ll.flag_lane) break;
          store8(out, ci + h, bytes, out_al, reduce_line_half<T, kOp, kR>(own[u][h], got[u], h, n_ranks, me, p.op));
        }
      }
    }
  }
  frame_end(c, f, 1, 0, false);  // no block barriers: NOTE [signal refresh]
}

// NOTE [LL128 two-shot] The payload's LL128 lines are cut into world_size shards of consecutive lines (shard q:
// lines [q * nlines / N, (q + 1) * nlines / N)); position i of a shard is its i-th line. The op's parity area of
// every rank's LL buffer holds a reduce-scatter part, N slots of `positions` lines (slot q: what rank q sends),
// then an all-gather part of the same shape. The 8-lane group that owns position i, on every rank:
//   1. loads line i of every shard of its input and sends shard q's to slot `me` of rank q's reduce-scatter part;
//   2. waits for the peers' lines of its own shard, reduces them with its own in rank order, stores the result
//      and sends it to slot `me` of every peer's all-gather part;
//   3. waits for the peers' results at position i and stores them.
// Every wait is for lines that the peers' groups of the same position send before they wait themselves (step 2's
// sends follow only step 1's receipts), so no cycle is possible, as in the one-shot. Each element crosses NVLink
// twice in all (2 (N - 1) / N of the payload out of every rank) instead of the one-shot's N - 1 times, for a
// second latency. The buffer-reuse argument of NOTE [LL lines] needs every rank to receive lines from every peer
// in every op: rank a gets rank b's lines of a's shard and b's results, so it suffices that at most one shard is
// empty; the selector keeps payloads of fewer than N lines on other paths (all_reduce_ll128_two_shot_min_bytes),
// and then every shard has a line. One rank computes each element, so all ranks get identical results.
template <class T, int kOp, int kR>
__global__ void __launch_bounds__(kThreads) all_reduce_ll128_two_shot_kernel(AllReduceLL128Params p) {
  const DeviceComm& c = p.comm;
  const Frame f = frame_begin(c, p.header);
  if (f.failed) return;  // NOTE [failed communicator]
  const int n_ranks = c.world_size, me = c.rank;
  const size_t bytes = p.count * sizeof(T);
  const size_t nlines = div_up(bytes, kLL128LineData);
  const size_t positions = div_up(nlines, static_cast<size_t>(n_ranks));
  const LL128Lane ll = ll128_lane(c, p, f.seq0 + 1);  // NOTE [LL flag zero]
  const char* in = static_cast<const char*>(p.in);
  char* out = static_cast<char*>(p.out);
  const bool in_al = aligned8(in), out_al = aligned8(out);
  const int group = ll.lane / kLL128LanesPerLine;
  const size_t warp = (blockIdx.x * size_t{blockDim.x} + threadIdx.x) / 32;
  const size_t stride = size_t{gridDim.x} * blockDim.x / 32 * kLL128LinesPerWarp;
  const uint32_t peers = peers_mask<kR>(n_ranks, me);
  auto first = [&](int q) { return q * nlines / n_ranks; };  // shard q's first line
  auto rs_line = [&](int from, size_t i) { return from * positions + i; };
  auto ag_line = [&](int from, size_t i) { return (n_ranks + from) * positions + i; };
  const size_t my_first = first(me), my_len = first(me + 1) - my_first;

  bool failed = false;
  for (size_t i = warp * kLL128LinesPerWarp + group; i - group < positions && !failed; i += stride) {
    // 1. Line i of every shard: mine stays in registers, the others go to their shards' ranks.
    uint32_t live = 0;  // bit q: shard q has a line i (from the reduce-scatter on: for peers q)
    uint2 mine[2];
    ll.load_own(mine, in, (my_first + i) * kLL128ChunksPerLine + ll.sub * 2, bytes, in_al, i < my_len);
    {
      uint2 own[kR][2];
#pragma unroll
      for (int q = 0; q < kR; ++q) {
        if (!((peers >> q) & 1)) continue;
        const bool valid = i < first(q + 1) - first(q);
        live |= static_cast<uint32_t>(valid) << q;
        ll.load_own(own[q], in, (first(q) + i) * kLL128ChunksPerLine + ll.sub * 2, bytes, in_al, valid);
      }
      __syncwarp();  // the 8 lanes of a line store it with one instruction
#pragma unroll
      for (int q = 0; q < kR; ++q) {
        if ((live >> q) & 1) st_line(ll.at(q, rs_line(me, i)), ll.pack(own[q]));
      }
    }
    // 2. The peers' lines of my shard, reduced with mine, stored, and sent to every peer.
    uint4 got[kR];
    const uint32_t have_mine = i < my_len ? peers : 0;
    auto rs_src = [&](int q) { return ll.at(me, rs_line(q, i)); };
#pragma unroll
    for (int q = 0; q < kR; ++q) {
      if ((have_mine >> q) & 1) got[q] = ld_line(rs_src(q));
    }
    if (!ll.wait(got, peers, have_mine, rs_src, f.deadline)) {
      failed = true;
      break;
    }
#pragma unroll
    for (int q = 0; q < kR; ++q) {
      if ((have_mine >> q) & 1) got[q] = ld_line(rs_src(q));
    }
    uint2 sum[2] = {};
    const size_t ci = (my_first + i) * kLL128ChunksPerLine + ll.sub * 2;
    if (i < my_len) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (h == 0 || !ll.flag_lane) sum[h] = reduce_line_half<T, kOp, kR>(mine[h], got, h, n_ranks, me, p.op);
      }
    }
    __syncwarp();  // the 8 lanes of a line store it with one instruction
    const uint4 v = ll.pack(sum);
    for (int q = 0; q < n_ranks; ++q) {
      if (q != me && i < my_len) st_line(ll.at(q, ag_line(me, i)), v);
    }
    if (i < my_len) {
      store8(out, ci, bytes, out_al, sum[0]);
      if (!ll.flag_lane) store8(out, ci + 1, bytes, out_al, sum[1]);
    }
    // 3. The peers' results at position i.
    auto ag_src = [&](int q) { return ll.at(me, ag_line(q, i)); };
#pragma unroll
    for (int q = 0; q < kR; ++q) {
      if ((live >> q) & 1) got[q] = ld_line(ag_src(q));
    }
    if (!ll.wait(got, peers, live, ag_src, f.deadline)) {
      failed = true;
      break;
    }
#pragma unroll
    for (int q = 0; q < kR; ++q) {
      if (!((live >> q) & 1)) continue;
      const uint4 v = ld_line(ag_src(q));
      const size_t ci = (first(q) + i) * kLL128ChunksPerLine + ll.sub * 2;
      store8(out, ci, bytes, out_al, LL128Lane::half(v, 0));
      if (!ll.flag_lane) store8(out, ci + 1, bytes, out_al, LL128Lane::half(v, 1));
    }
  }
  frame_end(c, f, 1, 0, false);  // no block barriers: NOTE [signal refresh]
}

}  // namespace

size_t all_reduce_ll_max_bytes(const device::DeviceComm& c) { return c.ll_slot_bytes / 2 - 8; }  // - header line

void launch_all_reduce_ll(const AllReduceLLParams& p, cudaStream_t stream) {
  const size_t nchunks = div_up(p.count * dtype_size(p.dtype), 8);
  const size_t per_thread = std::clamp<size_t>(p.chunks_per_thread, 1, 64);
  const size_t max_blocks = std::clamp<size_t>(p.max_blocks, 1, 1024);
  const size_t threads = std::clamp<size_t>(p.block_threads / 32 * 32, 32, kThreads);
  const size_t b = std::clamp<size_t>(div_up(nchunks, threads * per_thread), 1, max_blocks);
  const int blocks = static_cast<int>(b);
  if (p.kind == LLKind::kBroadcast || p.kind == LLKind::kAllGather || p.kind == LLKind::kAllToAll) {
    AllReduceLLParams q = p;  // bytes only: count in bytes
    q.count = p.count * dtype_size(p.dtype);
    if (p.kind == LLKind::kBroadcast) {
      SYMCOMM_CUDA_CHECK(launch_kernel(ll_broadcast_kernel, blocks, static_cast<int>(threads), stream, p.pdl, q));
      return;
    }
    dispatch_ranks_to_four(p.comm.world_size, [&](auto r) {
      constexpr int kR = decltype(r)::value;
      if (p.kind == LLKind::kAllGather) {
        SYMCOMM_CUDA_CHECK(launch_kernel(all_reduce_ll_kernel<uint8_t, kOpRuntime, kR, LLKind::kAllGather>, blocks,
                                         static_cast<int>(threads), stream, p.pdl, q));
      } else {
        SYMCOMM_CUDA_CHECK(launch_kernel(all_reduce_ll_kernel<uint8_t, kOpRuntime, kR, LLKind::kAllToAll>, blocks,
                                         static_cast<int>(threads), stream, p.pdl, q));
      }
    });
    return;
  }
  dispatch_reduce_to_four(p.dtype, p.op, p.comm.world_size, [&](auto t, auto o, auto r) {
    using T = typename decltype(t)::type;
    if (p.kind == LLKind::kReduceScatter) {
      SYMCOMM_CUDA_CHECK(
          launch_kernel(all_reduce_ll_kernel<T, decltype(o)::value, decltype(r)::value, LLKind::kReduceScatter>, blocks,
                        static_cast<int>(threads), stream, p.pdl, p));
    } else {
      SYMCOMM_CUDA_CHECK(
          launch_kernel(all_reduce_ll_kernel<T, decltype(o)::value, decltype(r)::value, LLKind::kAllReduce>, blocks,
                        static_cast<int>(threads), stream, p.pdl, p));
    }
  });
}

size_t all_reduce_ll128_slot_bytes(size_t payload_bytes) {
  return (div_up(payload_bytes, kLL128LineData) + 4) * kLL128LineBytes;
}

size_t all_reduce_ll128_two_shot_min_bytes(int world_size) {
  return static_cast<size_t>(world_size - 1) * kLL128LineData + 1;
}

size_t all_reduce_ll128_two_shot_max_bytes(int world_size, size_t slot_bytes) {
  return slot_bytes / (2 * kLL128LineBytes) * static_cast<size_t>(world_size) * kLL128LineData;
}

void launch_all_reduce_ll128(const AllReduceLL128Params& p, cudaStream_t stream) {
  const size_t nlines = div_up(p.count * dtype_size(p.dtype), kLL128LineData);
  // The two-shot's groups each own a position of every shard (NOTE [LL128 two-shot]).
  const size_t work = p.two_shot ? div_up(nlines, static_cast<size_t>(p.comm.world_size)) : nlines;
  const size_t per_group = std::clamp<size_t>(p.lines_per_group, 1, 64);
  const size_t max_blocks = std::clamp<size_t>(p.max_blocks, 1, 1024);
  const size_t lines_per_block = kThreads / kLL128LanesPerLine * per_group;
  const int blocks = static_cast<int>(std::clamp<size_t>(div_up(work, lines_per_block), 1, max_blocks));
  if (p.kind == LLKind::kAllGather || p.kind == LLKind::kAllToAll) {
    AllReduceLL128Params q = p;  // bytes only: count in bytes
    q.count = p.count * dtype_size(p.dtype);
    dispatch_ranks_to_four(p.comm.world_size, [&](auto r) {
      constexpr int kR = decltype(r)::value;
      if (p.kind == LLKind::kAllGather) {
        SYMCOMM_CUDA_CHECK(launch_kernel(all_reduce_ll128_kernel<uint8_t, kOpRuntime, kR, LLKind::kAllGather>, blocks,
                                         kThreads, stream, p.pdl, q));
      } else {
        SYMCOMM_CUDA_CHECK(launch_kernel(all_reduce_ll128_kernel<uint8_t, kOpRuntime, kR, LLKind::kAllToAll>, blocks,
                                         kThreads, stream, p.pdl, q));
      }
    });
    return;
  }
  dispatch_reduce_to_four(p.dtype, p.op, p.comm.world_size, [&](auto t, auto o, auto r) {
    using T = typename decltype(t)::type;
    constexpr int kO = decltype(o)::value, kR = decltype(r)::value;
    if (p.two_shot) {
      SYMCOMM_CUDA_CHECK(
          launch_kernel(all_reduce_ll128_two_shot_kernel<T, kO, kR>, blocks, kThreads, stream, p.pdl, p));
    } else if (p.kind == LLKind::kReduceScatter) {
      SYMCOMM_CUDA_CHECK(launch_kernel(all_reduce_ll128_kernel<T, kO, kR, LLKind::kReduceScatter>, blocks, kThreads,
                                       stream, p.pdl, p));
    } else {
      SYMCOMM_CUDA_CHECK(
          launch_kernel(all_reduce_ll128_kernel<T, kO, kR, LLKind::kAllReduce>, blocks, kThreads, stream, p.pdl, p));
    }
  });
}

}  // namespace symcomm::detail::cuda
