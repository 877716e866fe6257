#pragma once
/// \file bucketer.h
/// ReduceScatterBucketer: many small reduce-scatters (FSDP gradient shards) coalesced into few large ones.
///
/// Inputs are recorded per bucket; a bucket is keyed by (dtype, op, stream, algorithm, contention) of one
/// communicator (and so one device). When a bucket is flushed, its inputs are reduced by one reduce-scatter
/// into the bucket's memory (from the communicator's symmetric heap) and every callback is called with a
/// view of its part of the result. Where symcomm's own kernel runs that reduce-scatter, it reads the inputs
/// where they are (CUDA: one kernel; host: only the rows the peers need are copied); otherwise (NCCL, a
/// forced algorithm, one rank) the inputs are first copied into the bucket (host: memcpy; CUDA: one copy
/// kernel for up to kBucketCopySegments inputs, the list of (pointer, count) taken by value).
/// The bucketer is not used inside a collective group (Communicator::group_start): it coalesces by itself,
/// and its calls there throw Error(kInvalidArgument).
/// Recording allocates nothing per call: callbacks are kept in the bucket's own memory.
///
/// Ordering contract. Every rank must issue the same sequence of calls (reduce_scatter_async with the same
/// out_count, dtype, op and options; flush; teardown): buckets fill, flush and allocate collectively, in the
/// same order on every rank. A mismatch is a collective mismatch (error or hang until the timeout), as for
/// any collective.
///
/// Lifetimes. An input must stay valid and unchanged until its bucket is flushed: the copy into the bucket
/// is deferred to the flush so that one kernel copies many inputs (CUDA: the copy is ordered on the stream
/// at the flush). A result view is valid until that bucket is flushed again (explicitly or because it
/// filled) or teardown(); on the CUDA backend it is a device pointer, valid in stream order on the bucket's
/// stream (a consumer on another stream must wait for that stream first).
///
/// CUDA graphs: a flush may be captured once the bucket exists (its first flush allocates collectively, which
/// cannot be captured); the copy list is a kernel parameter, so replays copy from the same input addresses.
///
/// Not thread-safe: one thread uses a bucketer at a time.

#include <cstddef>
#include <functional>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

#include "symcomm/communicator.h"

namespace symcomm {

/// Options of a ReduceScatterBucketer.
struct BucketOptions {
  /// Total input bytes of one bucket (all ranks' parts): each bucket holds at most
  /// bucket_cap_mb * 2^20 / world_size bytes of output per rank, which must lie in [16 B, 4 GiB).
  double bucket_cap_mb = 25.0;
};

/// Inputs copied by one launch of the CUDA bucket copy kernel (the list travels as kernel parameters,
/// 16 bytes per input, within CUDA's 32,764 bytes of parameters).
inline constexpr size_t kBucketCopySegments = 2040;

namespace detail {
/// A callback constructed in a bucket's own memory (NOTE [callback storage] in src/core/bucketer.cc).
struct StoredCallback {
  void (*call)(void* object, const void* result, size_t count);
  void (*destroy)(void* object) noexcept;
  void* object;
};
}  // namespace detail

class ReduceScatterBucketer {
 public:
  /// Called with the reduced block of this rank: `count` elements at `result` (device pointer on CUDA).
  using Callback = std::function<void(const void* result, size_t count)>;

  /// Allocates nothing yet (buckets are allocated at their first flush). `comm` must outlive the
  /// bucketer. Throws Error(kInvalidArgument) if options.bucket_cap_mb is not a positive finite number.
  explicit ReduceScatterBucketer(Communicator& comm, BucketOptions options = {});
  /// Releases the bucket memory (collective, like Communicator::free). Pending inputs are dropped without
  /// communication and their callbacks never run: call flush() first (all ranks alike).
  ~ReduceScatterBucketer();
  ReduceScatterBucketer(const ReduceScatterBucketer&) = delete;
  ReduceScatterBucketer& operator=(const ReduceScatterBucketer&) = delete;

  /// Records a reduce-scatter of `input` (world_size * out_count elements, block r for rank r): this rank's
  /// result is out_count elements, block `rank` reduced over ranks with `op`.
  /// - If the input does not fit the bucket's remaining space, the bucket is flushed first (its reduction
  ///   runs, then its callbacks).
  /// - An input larger than a whole bucket (out_count * dtype size > bucket capacity per rank) is reduced at
  ///   once into a symmetric buffer of its own, without touching the buckets, and its callback runs right
  ///   away (before this call returns); the view is valid until the next flush() or teardown(), and the
  ///   buffer is reused for a later large input after that.
  /// - out_count == 0: recorded; its callback gets (a valid pointer, 0) at the flush.
  /// Throws Error(kInvalidArgument) for a null callback, a null input with out_count > 0, an input that
  /// overlaps a bucket's memory, invalid dtype/op/options or an input the backend cannot read (the same
  /// checks as Communicator::reduce_scatter), or inside a collective group; nothing is recorded then.
  void reduce_scatter_async(const void* input, size_t out_count, DataType dtype, ReduceOp op, Callback callback,
                            const CollOptions& options = {});
  /// The same for any callable taking (const void* result, size_t count): it is moved (or copied) into the
  /// bucketer's own memory, so recording allocates nothing per call however much the callable captures (a
  /// std::function keeps only 16 bytes of captures inline and allocates for more).
  template <class F>
  requires(!std::is_same_v<std::decay_t<F>, Callback> &&
           std::is_invocable_v<std::decay_t<F>&, const void*,
                               size_t>) void reduce_scatter_async(const void* input, size_t out_count, DataType dtype,
                                                                  ReduceOp op, F&& callback,
                                                                  const CollOptions& options = {}) {
    record(input, out_count, dtype, op, std::forward<F>(callback), options);
  }

  /// Runs every pending reduction (bucket by bucket, in the order the buckets were created), then every
  /// pending callback (callbacks may run in a different order than their inputs were recorded). If a
  /// callback throws, the others still run and the first exception is rethrown at the end. Host
  /// backend: results are final when the callbacks run. CUDA backend: the reductions are enqueued on the
  /// buckets' streams; the views are ready in stream order.
  void flush();

  /// Frees every bucket's memory and every large-input buffer (collective). The next use allocates again.
  /// Throws Error(kInvalidArgument) if inputs are pending (flush first), from inside a callback (the running
  /// flush still uses the buckets' memory) or inside a collective group.
  void teardown();

  /// Inputs recorded and not yet flushed.
  size_t pending() const;
  /// Output bytes per rank that one bucket holds.
  size_t bucket_bytes_per_rank() const;

 private:
  /// Where the next recorded callback goes (in its bucket's memory, with the bucket and the input's padded
  /// size for commit()), or, for an input larger than a bucket, null and the view of the result it was
  /// reduced into at once.
  struct Slot {
    void* storage;
    const void* large_result;
    void* bucket;
    size_t padded;
  };
  /// Validates and places an input: flushes its bucket first if it is full; reduces a too-large input at once.
  Slot prepare(const void* input, size_t out_count, DataType dtype, ReduceOp op, const CollOptions& options,
               size_t callback_bytes, size_t callback_align);
  /// Records the input placed by prepare() in `slot`, with its callback constructed there.
  void commit(const Slot& slot, const void* input, size_t out_count, detail::StoredCallback callback);
  [[noreturn]] static void reject_null_callback();

  template <class F>
  void record(const void* input, size_t out_count, DataType dtype, ReduceOp op, F&& callback,
              const CollOptions& options) {
    using Fn = std::decay_t<F>;
    if constexpr (alignof(Fn) > alignof(std::max_align_t) || !std::is_nothrow_destructible_v<Fn>) {
      record(input, out_count, dtype, op, Callback(std::forward<F>(callback)), options);  // rare: boxed
    } else {
      if constexpr (std::is_constructible_v<bool, const Fn&>) {
        if (!static_cast<bool>(callback)) reject_null_callback();  // an empty std::function, a null pointer
      }
      const Slot slot = prepare(input, out_count, dtype, op, options, sizeof(Fn), alignof(Fn));
      if (slot.storage == nullptr) {  // larger than a bucket: reduced already
        std::invoke(callback, slot.large_result, out_count);
        return;
      }
      Fn* object = ::new (slot.storage) Fn(std::forward<F>(callback));
      commit(slot, input, out_count,
             {.call = [](void* o, const void* r, size_t c) { std::invoke(*static_cast<Fn*>(o), r, c); },
              .destroy = [](void* o) noexcept { static_cast<Fn*>(o)->~Fn(); },
              .object = object});
    }
  }

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace symcomm
