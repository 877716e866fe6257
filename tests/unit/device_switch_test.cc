// DeviceSwitch, the bookkeeping of DeviceScope (NOTE [caller's device] in src/base/cuda_check.h), against a
// fake runtime: which devices it makes current, in which order, and what it gives back.
#include "base/device_switch.h"

#include <gtest/gtest.h>

#include <vector>

namespace symcomm::detail {
namespace {

// The fake runtime: one thread's current device and a record of every set. Reset by each test.
struct FakeRuntime {
  int current = 0;
  int get_error = 0;      ///< returned by get (the device is then not written)
  int refuse = -1;        ///< set(refuse) fails with kRefused
  std::vector<int> sets;  ///< every device set was asked for, in order
  static constexpr int kRefused = 101;
};
FakeRuntime fake;

int fake_get(int* device) {
  if (fake.get_error != 0) return fake.get_error;
  *device = fake.current;
  return 0;
}
int fake_set(int device) {
  fake.sets.push_back(device);
  if (device == fake.refuse) return FakeRuntime::kRefused;
  fake.current = device;
  return 0;
}
constexpr DeviceCalls kFake{.get = fake_get, .set = fake_set};

class DeviceSwitchTest : public ::testing::Test {
 protected:
  void SetUp() override { fake = FakeRuntime{}; }
};

TEST_F(DeviceSwitchTest, ACurrentDeviceIsLeftAloneAndNothingIsGivenBack) {
  fake.current = 3;
  DeviceSwitch s;
  EXPECT_EQ(s.enter(kFake, 3), 0);
  EXPECT_EQ(s.previous(), -1);
  EXPECT_EQ(s.leave(kFake), 0);
  EXPECT_TRUE(fake.sets.empty());
  EXPECT_EQ(fake.current, 3);
}

TEST_F(DeviceSwitchTest, AnotherDeviceIsMadeCurrentAndTheCallersIsGivenBack) {
  fake.current = 1;
  DeviceSwitch s;
  EXPECT_EQ(s.enter(kFake, 0), 0);
  EXPECT_EQ(fake.current, 0);
  EXPECT_EQ(s.previous(), 1);
  EXPECT_EQ(s.leave(kFake), 0);
  EXPECT_EQ(fake.current, 1);
  EXPECT_EQ(fake.sets, (std::vector<int>{0, 1}));
  EXPECT_EQ(s.leave(kFake), 0) << "a second leave gives nothing back";
  EXPECT_EQ(fake.sets.size(), 2u);
}

TEST_F(DeviceSwitchTest, NestedSwitchesGiveBackInReverseOrder) {
  fake.current = 2;
  DeviceSwitch outer, inner, same;
  EXPECT_EQ(outer.enter(kFake, 0), 0);
  EXPECT_EQ(inner.enter(kFake, 1), 0);
  EXPECT_EQ(same.enter(kFake, 1), 0);  // already current: no set
  EXPECT_EQ(same.leave(kFake), 0);
  EXPECT_EQ(fake.current, 1);
  EXPECT_EQ(inner.leave(kFake), 0);
  EXPECT_EQ(fake.current, 0);
  EXPECT_EQ(outer.leave(kFake), 0);
  EXPECT_EQ(fake.current, 2);
  EXPECT_EQ(fake.sets, (std::vector<int>{0, 1, 0, 2}));
}

TEST_F(DeviceSwitchTest, ARefusedDeviceChangesNothingAndGivesNothingBack) {
  fake.current = 1;
  fake.refuse = 5;
  DeviceSwitch s;
  EXPECT_EQ(s.enter(kFake, 5), FakeRuntime::kRefused);
  EXPECT_EQ(fake.current, 1);
  EXPECT_EQ(s.previous(), -1);
  EXPECT_EQ(s.leave(kFake), 0);
  EXPECT_EQ(fake.sets, (std::vector<int>{5}));
}

TEST_F(DeviceSwitchTest, AnUnreadableCurrentDeviceIsNotGivenBack) {
  fake.current = 1;
  fake.get_error = 3;
  DeviceSwitch s;
  EXPECT_EQ(s.enter(kFake, 0), 0);
  EXPECT_EQ(fake.current, 0);
  EXPECT_EQ(s.leave(kFake), 0);
  EXPECT_EQ(fake.current, 0);
  EXPECT_EQ(fake.sets, (std::vector<int>{0}));
}

TEST_F(DeviceSwitchTest, AFailedGiveBackIsReported) {
  fake.current = 4;
  DeviceSwitch s;
  EXPECT_EQ(s.enter(kFake, 0), 0);
  fake.refuse = 4;
  EXPECT_EQ(s.leave(kFake), FakeRuntime::kRefused);
  EXPECT_EQ(fake.current, 0);
}

}  // namespace
}  // namespace symcomm::detail
