#pragma once
// The bookkeeping of DeviceScope (src/base/cuda_check.h): which device to make current and which to give back.
// Kept apart from the CUDA runtime, whose two calls it takes as function pointers, so that it is tested
// without a GPU (tests/unit/device_switch_test.cc).

namespace symcomm::detail {

/// The two runtime calls a device switch makes; each returns 0 on success, else the runtime's error code.
struct DeviceCalls {
  int (*get)(int* device);  ///< writes the calling thread's current device
  int (*set)(int device);   ///< makes `device` the calling thread's current device
};

/// Makes a device current and gives the previous one back. A device that is current already is left alone
/// (no call to `set`, nothing to give back); a current device that cannot be read is not given back, since it
/// is not known.
class DeviceSwitch {
 public:
  /// Makes `device` current; returns 0, or `set`'s error (then nothing changed and nothing is given back).
  int enter(const DeviceCalls& calls, int device) {
    int current = -1;
    if (calls.get(&current) != 0) current = -1;
    if (current == device) return 0;
    const int err = calls.set(device);
    if (err != 0) return err;
    previous_ = current;
    return 0;
  }
  /// Makes the device that was current before enter() current again, if enter() changed it; returns `set`'s
  /// error (0 if there was nothing to do).
  int leave(const DeviceCalls& calls) {
    const int previous = previous_;
    previous_ = -1;
    return previous >= 0 ? calls.set(previous) : 0;
  }
  /// The device leave() gives back; -1 for none.
  int previous() const { return previous_; }

 private:
  int previous_ = -1;
};

}  // namespace symcomm::detail
