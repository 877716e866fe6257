// Tests of HeapAllocator (src/memory/heap_allocator.cc), the deterministic first-fit allocator behind the
// host symmetric heap: alignment, exhaustion and bad releases (Error kInvalidArgument), coalescing, find(),
// and agreement with an independent bitmap model of first fit on random sequences.

#include "memory/heap_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "symcomm/error.h"

namespace symcomm::detail {
namespace {

constexpr size_t kA = HeapAllocator::kAlignment;

// The code of the Error that f throws, or nullopt if it returns.
std::optional<ErrorCode> error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  return std::nullopt;
}

TEST(HeapAllocator, AlignmentIs256) { EXPECT_EQ(kA, 256u); }

TEST(HeapAllocator, CapacityRoundsDownToAlignment) {
  EXPECT_EQ(HeapAllocator(1000).capacity(), 3 * kA);
  EXPECT_EQ(HeapAllocator(4 * kA).capacity(), 4 * kA);
  EXPECT_EQ(HeapAllocator(4 * kA + 1).capacity(), 4 * kA);
  HeapAllocator tiny(kA - 1);
  EXPECT_EQ(tiny.capacity(), 0u);
  EXPECT_EQ(error_of([&] { tiny.allocate(0); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_of([&] { tiny.allocate(1); }), ErrorCode::kInvalidArgument);
}

TEST(HeapAllocator, OffsetsAreAlignedAndSizesRoundedUp) {
  HeapAllocator heap(64 * 1024);
  struct Step {
    size_t bytes, offset, size;
  };
  // First fit on an empty heap packs blocks one after another; 0 bytes still takes one aligned unit.
  const Step steps[] = {{1, 0, 256},        {255, 256, 256}, {256, 512, 256},    {257, 768, 512},
                        {1000, 1280, 1024}, {0, 2304, 256},  {4096, 2560, 4096}, {3, 6656, 256}};
  size_t used = 0;
  for (const Step& s : steps) {
    SCOPED_TRACE(s.bytes);
    size_t off = heap.allocate(s.bytes);
    EXPECT_EQ(off, s.offset);
    EXPECT_EQ(off % kA, 0u);
    size_t start = 1, size = 1;
    ASSERT_TRUE(heap.find(off, &start, &size));
    EXPECT_EQ(start, s.offset);
    EXPECT_EQ(size, s.size);
    used += s.size;
    EXPECT_EQ(heap.used(), used);
  }
}

TEST(HeapAllocator, ExhaustionThrowsInvalidArgument) {
  HeapAllocator heap(4 * kA);
  EXPECT_EQ(error_of([&] { heap.allocate(4 * kA + 1); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_of([&] { heap.allocate(SIZE_MAX); }), ErrorCode::kInvalidArgument);  // no overflow rounding up
  EXPECT_EQ(error_of([&] { heap.allocate(SIZE_MAX - kA + 2); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(heap.allocate(4 * kA), 0u);
  EXPECT_EQ(heap.used(), 4 * kA);
  EXPECT_EQ(error_of([&] { heap.allocate(1); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_of([&] { heap.allocate(0); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(heap.used(), 4 * kA);  // a failed allocation changes nothing
  try {
    heap.allocate(1);
    ADD_FAILURE() << "allocation from a full heap succeeded";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("SYMCOMM_HEAP_BYTES"), std::string::npos) << e.message();
  }
  heap.release(0);
  EXPECT_EQ(heap.used(), 0u);
  EXPECT_EQ(heap.allocate(4 * kA), 0u);
}

TEST(HeapAllocator, FragmentedFreeSpaceIsNotOneBlock) {
  HeapAllocator heap(4 * kA);
  std::array<size_t, 4> off{};
  for (size_t i = 0; i < off.size(); ++i) off[i] = heap.allocate(kA);
  EXPECT_EQ(off, (std::array<size_t, 4>{0, kA, 2 * kA, 3 * kA}));
  heap.release(off[0]);
  heap.release(off[2]);
  EXPECT_EQ(heap.used(), 2 * kA);
  // 2 units are free but not adjacent.
  EXPECT_EQ(error_of([&] { heap.allocate(2 * kA); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(heap.allocate(kA), 0u);  // first fit: the lowest free block
  EXPECT_EQ(heap.allocate(kA), 2 * kA);
  EXPECT_EQ(error_of([&] { heap.allocate(1); }), ErrorCode::kInvalidArgument);
}

TEST(HeapAllocator, ReleaseOfUnknownOffsetThrows) {
  HeapAllocator heap(16 * kA);
  EXPECT_EQ(error_of([&] { heap.release(0); }), ErrorCode::kInvalidArgument);  // nothing allocated
  size_t a = heap.allocate(2 * kA);
  size_t b = heap.allocate(kA);
  EXPECT_EQ(error_of([&] { heap.release(a + kA); }), ErrorCode::kInvalidArgument);  // inside a block
  EXPECT_EQ(error_of([&] { heap.release(a + 1); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_of([&] { heap.release(b + kA); }), ErrorCode::kInvalidArgument);    // free space
  EXPECT_EQ(error_of([&] { heap.release(100 * kA); }), ErrorCode::kInvalidArgument);  // beyond the heap
  EXPECT_EQ(heap.used(), 3 * kA);                                                     // failed releases change nothing
  heap.release(a);
  EXPECT_EQ(error_of([&] { heap.release(a); }), ErrorCode::kInvalidArgument);  // double free
  heap.release(b);
  EXPECT_EQ(heap.used(), 0u);
  EXPECT_EQ(heap.allocate(16 * kA), 0u);
}

// Allocate A, B, C filling the heap, release them in every order: the free space must coalesce into one
// block so that a full-capacity allocation succeeds again.
TEST(HeapAllocator, ReleasedBlocksCoalesceInEveryOrder) {
  for (size_t tail : {size_t{0}, 2 * kA}) {  // heap exactly full, or with free space after C
    std::array<int, 3> order = {0, 1, 2};
    do {
      HeapAllocator heap(6 * kA + tail);
      std::array<size_t, 3> blocks = {heap.allocate(kA), heap.allocate(2 * kA), heap.allocate(3 * kA)};
      ASSERT_EQ(blocks, (std::array<size_t, 3>{0, kA, 3 * kA}));
      for (int i : order) heap.release(blocks[i]);
      SCOPED_TRACE(::testing::Message() << "tail " << tail << " order " << order[0] << order[1] << order[2]);
      EXPECT_EQ(heap.used(), 0u);
      EXPECT_EQ(heap.allocate(heap.capacity()), 0u);
    } while (std::next_permutation(order.begin(), order.end()));
  }
}

TEST(HeapAllocator, ReleaseBThenAThenCCoalesces) {
  HeapAllocator heap(3 * kA);
  size_t a = heap.allocate(kA), b = heap.allocate(kA), c = heap.allocate(kA);
  heap.release(b);
  EXPECT_EQ(error_of([&] { heap.allocate(2 * kA); }), ErrorCode::kInvalidArgument);
  heap.release(a);
  EXPECT_EQ(error_of([&] { heap.allocate(3 * kA); }), ErrorCode::kInvalidArgument);  // C still live
  size_t ab = heap.allocate(2 * kA);                                                 // A and B merged
  EXPECT_EQ(ab, 0u);
  heap.release(ab);
  heap.release(c);
  EXPECT_EQ(heap.allocate(3 * kA), 0u);
}

TEST(HeapAllocator, FindReturnsTheLiveBlockContainingAnOffset) {
  HeapAllocator heap(16 * kA);
  size_t a = heap.allocate(2 * kA);  // [0, 512)
  size_t b = heap.allocate(kA);      // [512, 768)
  size_t start = 0, size = 0;
  struct Probe {
    size_t offset;
    bool found;
    size_t start, size;
  };
  const Probe probes[] = {{0, true, 0, 2 * kA},       {1, true, 0, 2 * kA},           {2 * kA - 1, true, 0, 2 * kA},
                          {2 * kA, true, 2 * kA, kA}, {3 * kA - 1, true, 2 * kA, kA}, {3 * kA, false, 0, 0},
                          {16 * kA, false, 0, 0},     {SIZE_MAX, false, 0, 0}};
  for (const Probe& p : probes) {
    SCOPED_TRACE(p.offset);
    ASSERT_EQ(heap.find(p.offset, &start, &size), p.found);
    if (p.found) {
      EXPECT_EQ(start, p.start);
      EXPECT_EQ(size, p.size);
    }
  }
  heap.release(a);
  EXPECT_FALSE(heap.find(0, &start, &size));
  EXPECT_FALSE(heap.find(2 * kA - 1, &start, &size));
  EXPECT_TRUE(heap.find(b, &start, &size));
  EXPECT_EQ(start, b);
}

// An independent model of first fit over 256-byte units: a bitmap scanned from the start.
class BitmapModel {
 public:
  explicit BitmapModel(size_t units) : used_(units, false) {}
  std::optional<size_t> allocate(size_t bytes) {
    size_t n = std::max<size_t>(1, (bytes + kA - 1) / kA);
    for (size_t start = 0; start + n <= used_.size(); ++start) {
      if (std::none_of(used_.begin() + start, used_.begin() + start + n, [](bool u) { return u; })) {
        std::fill(used_.begin() + start, used_.begin() + start + n, true);
        return start * kA;
      }
    }
    return std::nullopt;
  }
  void release(size_t offset, size_t bytes) {
    std::fill(used_.begin() + offset / kA, used_.begin() + (offset + bytes) / kA, false);
  }
  size_t used_bytes() const { return kA * std::count(used_.begin(), used_.end(), true); }

 private:
  std::vector<bool> used_;
};

struct LiveBlock {
  size_t offset, size;
};

// Feeds one random sequence to two allocators and the model: identical offsets everywhere, no overlap.
TEST(HeapAllocator, RandomSequencesAreDeterministicAndFirstFit) {
  for (uint64_t seed : {1, 2, 3}) {
    SCOPED_TRACE(seed);
    constexpr size_t kUnits = 256;
    HeapAllocator h1(kUnits * kA), h2(kUnits * kA);
    BitmapModel model(kUnits);
    std::vector<LiveBlock> live;
    std::mt19937_64 rng(seed);
    int allocations = 0, failures = 0;
    for (int step = 0; step < 20000; ++step) {
      if (live.empty() || rng() % 100 < 55) {
        // Sizes from 0 to ~40 units, with odd byte counts.
        size_t bytes = rng() % 8 == 0 ? rng() % (40 * kA) : (rng() % 8) * kA + rng() % 3;
        std::optional<size_t> want = model.allocate(bytes);
        std::optional<ErrorCode> e1, e2;
        size_t o1 = 0, o2 = 0;
        e1 = error_of([&] { o1 = h1.allocate(bytes); });
        e2 = error_of([&] { o2 = h2.allocate(bytes); });
        ASSERT_EQ(e1, e2) << "step " << step;
        if (!want) {
          ASSERT_EQ(e1, ErrorCode::kInvalidArgument) << "step " << step << ": model found no room for " << bytes;
          ++failures;
          continue;
        }
        ASSERT_FALSE(e1.has_value()) << "step " << step << ": allocate(" << bytes << ") failed, model: " << *want;
        ASSERT_EQ(o1, o2) << "step " << step;
        ASSERT_EQ(o1, *want) << "step " << step << ": allocate(" << bytes << ")";
        size_t start = 0, size = 0;
        ASSERT_TRUE(h1.find(o1, &start, &size));
        live.push_back({o1, size});
        ++allocations;
      } else {
        size_t i = rng() % live.size();
        h1.release(live[i].offset);
        h2.release(live[i].offset);
        model.release(live[i].offset, live[i].size);
        live.erase(live.begin() + static_cast<ptrdiff_t>(i));
      }
      ASSERT_EQ(h1.used(), model.used_bytes()) << "step " << step;
      ASSERT_EQ(h2.used(), h1.used()) << "step " << step;
    }
    // Blocks never overlap and stay inside the heap.
    std::sort(live.begin(), live.end(), [](const LiveBlock& x, const LiveBlock& y) { return x.offset < y.offset; });
    for (size_t i = 0; i < live.size(); ++i) {
      EXPECT_LE(live[i].offset + live[i].size, h1.capacity());
      if (i > 0) {
        EXPECT_LE(live[i - 1].offset + live[i - 1].size, live[i].offset);
      }
    }
    EXPECT_GT(allocations, 5000);
    EXPECT_GT(failures, 10);  // the sequence reaches exhaustion
    for (const LiveBlock& b : live) h1.release(b.offset);
    EXPECT_EQ(h1.allocate(h1.capacity()), 0u);  // everything coalesced again
  }
}

}  // namespace
}  // namespace symcomm::detail
