// ReduceScatterBucketer (include/symcomm/bucketer.h): records small reduce-scatters per bucket and runs each
// bucket as one reduce-scatter. Where symcomm's own algorithm runs it, that is one gathered reduce-scatter
// read from the inputs (CUDA: one kernel, NOTE [gathered flush] in src/algos/cuda_gathered_reduce_scatter.cu;
// host: only the rows the peers need are copied into the bucket, NOTE [host gathered flush] in
// src/backends/host/host_reduce_scatter.cc; same output layout as below); otherwise (NCCL, a forced algorithm, one
// rank) one copy pass into the bucket plus one reduce-scatter of it (zero-copy). Not inside a collective
// group: the bucketer coalesces by itself, and a group would defer the reduction past the callbacks.
//
// NOTE [bucket layout] A bucket's memory (Communicator::alloc, so symmetric) is
//   [input: world_size blocks of cap bytes | output: cap bytes],  cap = bucket_cap_mb MiB / world_size.
// At a flush with C elements recorded (entry k at element offset off_k, offsets padded to 16 bytes so every
// view and copy is aligned), rank block r of entry k goes to input + (r * C + off_k) * es: the first
// world_size * C elements are then exactly the input of one reduce-scatter of count C, whose output block
// holds entry k's result at output + off_k * es. The copies wait for the flush because C is known only then,
// and so that one kernel copies many inputs. Padding elements are never read by a callback.
//
// NOTE [callback storage] A recorded callback is constructed in memory of its bucket (CallbackArena: chunks
// reused from flush to flush), not in a std::function: a std::function keeps 16 bytes of captures inline and
// heap-allocates for more (and frees it after the call), and a training loop records hundreds of callbacks
// per step: recording 512 callbacks that capture 32 bytes takes 13.4-14.7 us with std::function and
// 9.9-10.4 us here (CPU machine). The arena is rewound once its bucket has no entry
// left, i.e. after the flush that ran (or dropped) every callback constructed in it.
//
// NOTE [large buffers] An input larger than a bucket is reduced at once into a symmetric buffer of its own,
// whose view is valid until the next flush() (bucketer.h). Each flush() retires the buffers handed out since
// the previous one (`large` -> `spare`) and frees those retired by the previous flush that were not reused;
// a large input takes the smallest spare buffer that fits before allocating. So a training loop with one
// oversized gradient per step reuses one buffer instead of holding one per step until teardown() (which
// exhausted the heap after heap / size steps). Every rank makes the same calls, so the same choices.

#include "symcomm/bucketer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <utility>
#include <vector>

#include "algos/bucket_copy.h"
#include "algos/request.h"
#include "base/check.h"
#include "core/comm_core.h"

namespace symcomm {
namespace {

size_t round_up(size_t a, size_t b) { return (a + b - 1) / b * b; }

bool same_options(const CollOptions& a, const CollOptions& b) {
  return a.stream == b.stream && a.algorithm == b.algorithm && a.contention == b.contention;
}

}  // namespace

namespace detail {

void host_bucket_copy(const BucketCopySegment* segs, size_t n, char* dst, size_t row_stride, int rows, int skip_row) {
  for (size_t k = 0; k < n; ++k) {
    const auto* src = static_cast<const char*>(segs[k].src);
    for (int r = 0; r < rows; ++r) {
      if (segs[k].bytes && r != skip_row)  // row offsets in 64 bits: r * bytes passes 4 GiB from the third row
        std::memcpy(dst + static_cast<size_t>(r) * row_stride + segs[k].dst_offset,
                    src + static_cast<size_t>(r) * segs[k].bytes, segs[k].bytes);
    }
  }
}

}  // namespace detail

namespace {

/// Bump allocation for recorded callbacks (NOTE [callback storage]); chunks are kept and reused after reset().
class CallbackArena {
 public:
  void* allocate(size_t bytes, size_t align) {
    for (;;) {
      if (chunk_ < chunks_.size()) {
        const size_t at = (used_ + align - 1) / align * align;
        if (at + bytes <= chunks_[chunk_].bytes) {
          used_ = at + bytes;
          return chunks_[chunk_].mem.get() + at;
        }
        if (chunk_ + 1 < chunks_.size()) {
          ++chunk_;
          used_ = 0;
          continue;
        }
      }
      // operator new[] aligns for std::max_align_t, the most a stored callable asks for (bucketer.h).
      const size_t n = std::max(bytes, kChunkBytes);
      chunks_.push_back({std::make_unique_for_overwrite<std::byte[]>(n), n});
      chunk_ = chunks_.size() - 1;
      used_ = 0;
    }
  }
  void reset() {
    chunk_ = 0;
    used_ = 0;
  }

 private:
  static constexpr size_t kChunkBytes = 16 << 10;
  struct Chunk {
    std::unique_ptr<std::byte[]> mem;
    size_t bytes;
  };
  std::vector<Chunk> chunks_;
  size_t chunk_ = 0, used_ = 0;
};

}  // namespace

struct ReduceScatterBucketer::Impl {
  using Stored = detail::StoredCallback;
  struct Entry {
    const void* input;
    size_t count;
    size_t offset;  ///< elements into the bucket's per-rank block
    Stored callback;
  };
  struct Bucket {
    DataType dtype;
    ReduceOp op;
    CollOptions options;
    char* mem = nullptr;  ///< NOTE [bucket layout]; nullptr until the first flush (or after teardown)
    size_t used = 0;      ///< elements per rank, padded offsets included
    std::vector<Entry> entries;
    CallbackArena arena;  ///< the entries' callbacks (NOTE [callback storage])

    Bucket(DataType d, ReduceOp o, const CollOptions& opt) : dtype(d), op(o), options(opt) {}
    Bucket(const Bucket&) = delete;
    Bucket& operator=(const Bucket&) = delete;
    ~Bucket() {  // pending callbacks are dropped without running (bucketer.h)
      for (Entry& e : entries) e.callback.destroy(e.callback.object);
    }
  };
  /// A flushed entry whose callback has not run yet.
  struct Done {
    const void* result;
    size_t count;
    Stored callback;
  };
  /// Flushed entries; whatever an exception leaves unrun is destroyed without running.
  struct DoneList {
    std::vector<Done> items;
    DoneList() = default;
    DoneList(const DoneList&) = delete;
    DoneList& operator=(const DoneList&) = delete;
    ~DoneList() {
      for (Done& d : items) d.callback.destroy(d.callback.object);
    }
  };

  Impl(Communicator& c, detail::CommCore& k, BucketOptions o) : comm(c), core(k), options(o) {
    SYMCOMM_CHECK_ARG(std::isfinite(o.bucket_cap_mb) && o.bucket_cap_mb > 0,
                      "ReduceScatterBucketer: bucket_cap_mb must be a positive number (got {})", o.bucket_cap_mb);
    n = comm.world_size();
    double per_rank = o.bucket_cap_mb * 1048576.0 / n;
    SYMCOMM_CHECK_ARG(per_rank >= 16 && per_rank <= static_cast<double>(detail::kMaxBucketBytesPerRank),
                      "ReduceScatterBucketer: bucket_cap_mb {} gives {} bytes per rank (need 16 B to 4 GiB)",
                      o.bucket_cap_mb, per_rank);
    cap_bytes = static_cast<size_t>(per_rank) / 16 * 16;
  }

  Bucket& bucket_for(DataType dtype, ReduceOp op, const CollOptions& o) {
    for (auto& b : buckets) {
      if (b->dtype == dtype && b->op == op && same_options(b->options, o)) return *b;
    }
    buckets.push_back(std::make_unique<Bucket>(dtype, op, o));
    return *buckets.back();
  }

  bool overlaps_buckets(const void* p, size_t bytes) const {
    auto lo = reinterpret_cast<uintptr_t>(p);
    for (const auto& b : buckets) {
      if (!b->mem) continue;
      auto blo = reinterpret_cast<uintptr_t>(b->mem);
      if (lo < blo + (n + 1) * cap_bytes && blo < lo + bytes) return true;
    }
    for (const auto* list : {&large, &spare}) {
      for (const auto& [l, l_bytes] : *list) {
        auto llo = reinterpret_cast<uintptr_t>(l);
        if (lo < llo + l_bytes && llo < lo + bytes) return true;
      }
    }
    return false;
  }

  // A symmetric buffer of at least `bytes` for a large input (NOTE [large buffers]).
  void* large_buffer(size_t bytes) {
    auto best = spare.end();
    for (auto it = spare.begin(); it != spare.end(); ++it) {
      if (it->second >= bytes && (best == spare.end() || it->second < best->second)) best = it;
    }
    if (best != spare.end()) {
      large.push_back(*best);
      spare.erase(best);
    } else {
      large.emplace_back(comm.alloc(bytes), bytes);
    }
    return large.back().first;
  }

  // At every flush(): frees the buffers retired by the previous flush and not reused, retires the rest.
  void retire_large_buffers() {
    while (!spare.empty()) {
      comm.free(spare.back().first);
      spare.pop_back();
    }
    spare.swap(large);
  }

  void check_usable(const char* what) const {
    SYMCOMM_CHECK_ARG(!core.in_group(),
                      "ReduceScatterBucketer::{}: not inside a collective group (the bucketer coalesces by itself; "
                      "end the group first)",
                      what);
  }

  // Copies the bucket's inputs in, reduces, and moves its entries to `done` (callbacks not yet called).
  void run_bucket(Bucket& b, DoneList& done) {
    if (b.entries.empty()) return;
    const size_t es = dtype_size(b.dtype), c = b.used;
    if (!b.mem) b.mem = static_cast<char*>(comm.alloc((n + 1) * cap_bytes));
    char* out = b.mem + n * cap_bytes;
    segs.clear();
    for (const Entry& e : b.entries) {
      // Both below cap_bytes <= kMaxBucketBytesPerRank (constructor), so they fit in 32 bits.
      segs.push_back({.src = e.input,
                      .dst_offset = static_cast<uint32_t>(e.offset * es),
                      .bytes = static_cast<uint32_t>(e.count * es)});
    }
    const detail::GatheredReduceScatter g{.segs = segs.data(),
                                          .nseg = segs.size(),
                                          .stage = b.mem,
                                          .out = out,
                                          .count = c,
                                          .dtype = b.dtype,
                                          .op = b.op,
                                          .options = b.options};
    if (!core.reduce_scatter_gathered(g)) {
      core.backend().bucket_copy(segs.data(), segs.size(), b.mem, c * es, n, b.options.stream);
      if (c > 0) comm.reduce_scatter(b.mem, out, c, b.dtype, b.op, b.options);
    }
    done.items.reserve(done.items.size() + b.entries.size());
    for (Entry& e : b.entries) done.items.push_back({out + e.offset * es, e.count, e.callback});
    pending -= b.entries.size();
    b.entries.clear();
    b.used = 0;
  }

  // Every callback runs (and is destroyed) even if one throws; the first exception is rethrown afterwards.
  // Then the arenas of the buckets left empty are rewound: the callbacks constructed there are gone. Not
  // from inside a callback that recorded (and so flushed) again: the outer list still lives in them.
  void run_callbacks(DoneList& done) {
    std::exception_ptr first;
    ++callback_depth;
    for (Done& d : done.items) {
      try {
        d.callback.call(d.callback.object, d.result, d.count);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
      d.callback.destroy(d.callback.object);
    }
    done.items.clear();
    if (--callback_depth == 0) {
      for (auto& b : buckets) {
        if (b->entries.empty()) b->arena.reset();
      }
    }
    if (first) std::rethrow_exception(first);
  }

  void release_memory() {
    for (auto& b : buckets) {
      comm.free(b->mem);
      b->mem = nullptr;
    }
    buckets.clear();
    for (auto* list : {&large, &spare}) {
      for (const auto& [l, l_bytes] : *list) comm.free(l);
      list->clear();
    }
  }

  Communicator& comm;
  detail::CommCore& core;
  BucketOptions options;
  int n = 1;
  size_t cap_bytes = 0;
  size_t pending = 0;
  std::vector<std::unique_ptr<Bucket>> buckets;  ///< creation order, the same on every rank
  std::vector<std::pair<void*, size_t>> large;   ///< outputs (and bytes) of inputs larger than a bucket
  std::vector<std::pair<void*, size_t>> spare;   ///< such outputs retired by the last flush (NOTE [large buffers])
  std::vector<detail::BucketCopySegment> segs;   ///< reused between flushes
  int callback_depth = 0;  ///< run_callbacks() calls in progress (a callback may record and flush again)
};

ReduceScatterBucketer::ReduceScatterBucketer(Communicator& comm, BucketOptions options)
    : impl_(std::make_unique<Impl>(comm, *comm.core_, options)) {}

ReduceScatterBucketer::~ReduceScatterBucketer() {
  try {
    impl_->release_memory();
  } catch (...) {  // a destructor must not throw; the communicator reports its own failure
  }
}

void ReduceScatterBucketer::reduce_scatter_async(const void* input, size_t out_count, DataType dtype, ReduceOp op,
                                                 Callback callback, const CollOptions& options) {
  record(input, out_count, dtype, op, std::move(callback), options);
}

void ReduceScatterBucketer::reject_null_callback() {
  SYMCOMM_THROW(kInvalidArgument, "ReduceScatterBucketer::reduce_scatter_async: callback is empty");
}

ReduceScatterBucketer::Slot ReduceScatterBucketer::prepare(const void* input, size_t out_count, DataType dtype,
                                                           ReduceOp op, const CollOptions& options,
                                                           size_t callback_bytes, size_t callback_align) {
  Impl& m = *impl_;
  m.check_usable("reduce_scatter_async");
  // The checks of Communicator::reduce_scatter (enums, null input, byte-size overflow, and the backend's:
  // pointer kinds and devices, alignment), at record time.
  // The output is the bucket's (it passes the backend's checks); this rank's block of the input stands in for it
  // (in place: NOTE [in place]) and is never written.
  const size_t own_block = static_cast<size_t>(m.core.ctx().ranks.rank) * out_count * dtype_size(dtype);
  detail::Request r{.kind = Collective::kReduceScatter,
                    .in = input,
                    .out = input ? static_cast<char*>(const_cast<void*>(input)) + own_block : nullptr,
                    .count = out_count,
                    .dtype = dtype,
                    .op = op,
                    .root = 0,
                    .options = options};
  m.core.check_arguments(r);
  const size_t es = dtype_size(dtype), bytes = out_count * es;
  SYMCOMM_CHECK_ARG(!m.overlaps_buckets(input, bytes * m.n),
                    "ReduceScatterBucketer::reduce_scatter_async: input {} overlaps the bucketer's own memory", input);
  if (bytes > m.cap_bytes) {
    // Larger than a whole bucket: reduced at once into a symmetric buffer of its own (zero-copy output;
    // NOTE [large buffers]); the caller runs the callback.
    void* out = m.large_buffer(bytes);
    m.comm.reduce_scatter(input, out, out_count, dtype, op, options);
    return {.storage = nullptr, .large_result = out, .bucket = nullptr, .padded = 0};
  }
  Impl::Bucket& b = m.bucket_for(dtype, op, options);
  const size_t padded = round_up(out_count, std::max<size_t>(1, 16 / es));
  // Full: flush this bucket before adding. Its callbacks may record into it again (even fill it), so the room
  // is checked again after every flush; an empty bucket always has room (bytes <= cap_bytes, both padded to 16).
  while ((b.used + padded) * es > m.cap_bytes) {
    Impl::DoneList done;
    m.run_bucket(b, done);
    m.run_callbacks(done);
  }
  return {.storage = b.arena.allocate(callback_bytes, callback_align),
          .large_result = nullptr,
          .bucket = &b,
          .padded = padded};
}

void ReduceScatterBucketer::commit(const Slot& slot, const void* input, size_t out_count,
                                   detail::StoredCallback callback) {
  Impl& m = *impl_;
  auto& b = *static_cast<Impl::Bucket*>(slot.bucket);
  try {
    SYMCOMM_CHECK((b.used + slot.padded) * dtype_size(b.dtype) <= m.cap_bytes, kInternal,
                  "ReduceScatterBucketer: an input would overflow its bucket ({} + {} elements)", b.used, slot.padded);
    b.entries.push_back({.input = input, .count = out_count, .offset = b.used, .callback = callback});
  } catch (...) {
    callback.destroy(callback.object);
    throw;
  }
  b.used += slot.padded;
  ++m.pending;
}

void ReduceScatterBucketer::flush() {
  impl_->check_usable("flush");
  impl_->retire_large_buffers();
  Impl::DoneList done;
  for (auto& b : impl_->buckets) impl_->run_bucket(*b, done);
  impl_->run_callbacks(done);
}

void ReduceScatterBucketer::teardown() {
  impl_->check_usable("teardown");
  // The running flush still holds callbacks in the buckets' memory and views of their results.
  SYMCOMM_CHECK_ARG(impl_->callback_depth == 0, "ReduceScatterBucketer::teardown: not from inside a callback");
  SYMCOMM_CHECK_ARG(impl_->pending == 0,
                    "ReduceScatterBucketer::teardown: {} input(s) still pending; call flush() first (on every rank)",
                    impl_->pending);
  impl_->release_memory();
}

size_t ReduceScatterBucketer::pending() const { return impl_->pending; }
size_t ReduceScatterBucketer::bucket_bytes_per_rank() const { return impl_->cap_bytes; }

}  // namespace symcomm
