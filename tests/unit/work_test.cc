// The Work objects of src/backends/work.cc: a tracked Work marks its collectives' op-history records done or
// failed once its completion is seen, and not before (otherwise asynchronous collectives would stay "running"
// in the history for good, and a dump after a later error would point at long-finished ops).

#include <gtest/gtest.h>

#include <stdexcept>

#include "backends/backend.h"
#include "base/deadline.h"
#include "base/op_history.h"

namespace symcomm::detail {
namespace {

// A Work completed by the test.
class FakeWork final : public Work {
 public:
  bool done = false;
  std::exception_ptr error;
  bool is_completed() override { return done; }
  void wait() override {
    ASSERT_TRUE(done) << "the fake would block";
    if (error) std::rethrow_exception(error);
  }
  bool wait_for(std::chrono::milliseconds) override {
    if (done && error) std::rethrow_exception(error);
    return done;
  }
  std::exception_ptr exception() override { return done ? error : nullptr; }
};

OpState state_of(const OpHistory& h, uint64_t seq) {
  for (const OpRecord& r : h.snapshot()) {
    if (r.seq == seq) return r.state;
  }
  ADD_FAILURE() << "no record " << seq;
  return OpState::kIssued;
}

TEST(TrackedWork, MarksItsOpsDoneOnceCompletionIsSeen) {
  OpHistory h;
  const uint64_t other = h.record({.state = OpState::kRunning});
  const uint64_t a = h.record({.state = OpState::kRunning}), b = h.record({.state = OpState::kRunning});
  auto fake = std::make_shared<FakeWork>();
  auto w = make_tracked_work(fake, h, {a, b});
  EXPECT_FALSE(w->is_completed());
  EXPECT_FALSE(w->wait_for(std::chrono::milliseconds(0)));
  EXPECT_EQ(w->exception(), nullptr);
  EXPECT_EQ(state_of(h, a), OpState::kRunning);
  fake->done = true;
  EXPECT_TRUE(w->is_completed());
  EXPECT_EQ(state_of(h, a), OpState::kDone);
  EXPECT_EQ(state_of(h, b), OpState::kDone);
  EXPECT_EQ(state_of(h, other), OpState::kRunning) << "only its own records";
  w->wait();  // and again: nothing changes
  EXPECT_EQ(state_of(h, b), OpState::kDone);
}

TEST(TrackedWork, MarksItsOpsFailedWhenItCompletesWithAnError) {
  for (int how = 0; how < 3; ++how) {
    OpHistory h;
    const uint64_t a = h.record({.state = OpState::kRunning});
    auto fake = std::make_shared<FakeWork>();
    auto w = make_tracked_work(fake, h, {a});
    fake->done = true;
    fake->error = std::make_exception_ptr(std::runtime_error("device error"));
    if (how == 0) {
      EXPECT_THROW(w->wait(), std::runtime_error);
    } else if (how == 1) {
      EXPECT_THROW(w->wait_for(std::chrono::milliseconds(5)), std::runtime_error);
    } else {
      EXPECT_NE(w->exception(), nullptr);
    }
    EXPECT_EQ(state_of(h, a), OpState::kFailed) << "seen through call " << how;
    EXPECT_TRUE(w->is_completed());
  }
}

// The Work may be used after the communicator (and its OpHistory) is gone: it keeps a handle on the records
// (with a reference instead, marking the records would read freed memory: valgrind shows it).
TEST(TrackedWork, OutlivesTheHistoryItWasMadeWith) {
  auto fake = std::make_shared<FakeWork>();
  std::shared_ptr<Work> w;
  OpHistory survivor;
  {
    OpHistory h;
    const uint64_t a = h.record({.state = OpState::kRunning});
    w = make_tracked_work(fake, h, {a});
    survivor = h;  // a handle kept elsewhere sees what the Work does after h is gone
  }
  fake->done = true;
  w->wait();
  ASSERT_EQ(survivor.snapshot().size(), 1u);
  EXPECT_EQ(survivor.snapshot()[0].state, OpState::kDone);
}

TEST(TimeAfter, SaturatesInsteadOfOverflowing) {
  EXPECT_EQ(time_after(std::chrono::milliseconds::max()), Clock::time_point::max());
  const auto before = Clock::now();
  EXPECT_GE(time_after(std::chrono::hours(1)), before + std::chrono::hours(1));
  const auto negative = time_after(std::chrono::milliseconds(-5));
  EXPECT_LE(negative, Clock::now());
}

}  // namespace
}  // namespace symcomm::detail
