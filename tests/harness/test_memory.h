#pragma once
// TestMemory: a backend's ordinary memory as the test bodies of tests/backend_cases/ use it, so that one body
// tests one behaviour on both backends: the host program (tests/ranks) runs it on HostMemory, the GPU program
// (tests/gpu) on CudaMemory (tests/gpu/gpu_test_util.h). Errors of the memory itself throw std::runtime_error.

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "symcomm/communicator.h"

namespace symcomm::testing {

class TestMemory {
 public:
  virtual ~TestMemory() = default;
  /// "host" or "cuda", for messages.
  virtual const char* name() const = 0;
  /// The options of the communicators the bodies make (the backend, its device).
  virtual CommOptions options() const = 0;
  /// Memory the backend's collectives take that is not the symmetric heap (host: malloc; CUDA: cudaMalloc).
  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  /// Copies between the test's host memory and this memory (or the heap), after everything queued before.
  virtual void write(void* dst, const void* src, size_t bytes) = 0;
  virtual void read(void* dst, const void* src, size_t bytes) = 0;
  virtual void set(void* dst, uint8_t byte, size_t bytes) = 0;
  /// Waits for everything the communicators' calls queued (host: they are done when they return).
  virtual void sync() = 0;

  template <class T>
  std::vector<T> read_vector(const void* src, size_t count) {
    std::vector<T> out(count);
    read(out.data(), src, count * sizeof(T));
    return out;
  }
  template <class T>
  void write_vector(void* dst, const std::vector<T>& v) {
    write(dst, v.data(), v.size() * sizeof(T));
  }
};

class HostMemory final : public TestMemory {
 public:
  const char* name() const override { return "host"; }
  CommOptions options() const override { return {}; }
  void* alloc(size_t bytes) override {
    void* p = std::malloc(bytes ? bytes : 1);
    if (!p) throw std::runtime_error("HostMemory: out of memory");
    return p;
  }
  void release(void* p) override { std::free(p); }
  // An empty copy may name null pointers (an empty vector's data()), which memcpy and memset must not get.
  void write(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void read(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void set(void* dst, uint8_t byte, size_t bytes) override {
    if (bytes) std::memset(dst, byte, bytes);
  }
  void sync() override {}
};

/// A buffer of a TestMemory (`heap`: in `comm`'s symmetric heap instead), released at scope end.
class TestBuffer {
 public:
  TestBuffer(TestMemory& mem, size_t bytes) : mem_(&mem), ptr_(mem.alloc(bytes)) {}
  TestBuffer(TestMemory& mem, Communicator& heap_of, size_t bytes)
      : mem_(&mem), heap_(&heap_of), ptr_(heap_of.alloc(bytes)) {}
  ~TestBuffer() {
    if (heap_) {
      heap_->free(ptr_);
    } else {
      mem_->release(ptr_);
    }
  }
  TestBuffer(const TestBuffer&) = delete;
  TestBuffer& operator=(const TestBuffer&) = delete;
  template <class T = void>
  T* get() const {
    return static_cast<T*>(ptr_);
  }

 private:
  TestMemory* mem_;
  Communicator* heap_ = nullptr;
  void* ptr_;
};

/// A TestBuffer (or, with `heap`, a buffer of that communicator's symmetric heap) whose payload sits between two
/// guards of kGuardByte, so that a check sees every byte written outside it. prepare() places a payload of up to
/// `capacity` bytes `misalign` bytes (below kMaxMisalign) past a guard of kGuard bytes: the front guard is the
/// kGuard + misalign bytes before the payload, the back guard the kGuard bytes after it.
class GuardedTestBuffer {
 public:
  static constexpr size_t kGuard = 256;
  static constexpr size_t kMaxMisalign = 16;
  static constexpr uint8_t kGuardByte = 0xa5;

  GuardedTestBuffer(TestMemory& mem, size_t capacity, Communicator* heap = nullptr)
      : mem_(&mem),
        capacity_(capacity),
        buf_(heap ? TestBuffer(mem, *heap, capacity + kMaxMisalign + 2 * kGuard)
                  : TestBuffer(mem, capacity + kMaxMisalign + 2 * kGuard)) {}

  /// Places a payload of `bytes` and writes both of its guards (not the payload); returns the payload.
  uint8_t* prepare(size_t bytes, size_t misalign = 0) {
    if (bytes > capacity_ || misalign >= kMaxMisalign) throw std::runtime_error("GuardedTestBuffer: payload too big");
    bytes_ = bytes;
    front_ = kGuard + misalign;
    mem_->set(buf_.get(), kGuardByte, front_);
    mem_->set(data() + bytes_, kGuardByte, kGuard);
    return data();
  }
  uint8_t* data() const { return buf_.get<uint8_t>() + front_; }
  /// Fills the payload with `byte`.
  void poison(uint8_t byte) { mem_->set(data(), byte, bytes_); }
  /// The payload's bytes; *guards_ok: whether both guards are intact (one copy of the guards and the payload).
  std::vector<uint8_t> read(bool* guards_ok) {
    const std::vector<uint8_t> all = mem_->read_vector<uint8_t>(buf_.get(), front_ + bytes_ + kGuard);
    *guards_ok = intact(all.data(), front_) && intact(all.data() + front_ + bytes_, kGuard);
    return std::vector<uint8_t>(all.begin() + front_, all.begin() + front_ + bytes_);
  }
  /// Whether both guards are intact (copies the guards only).
  bool guards_ok() {
    return intact(mem_->read_vector<uint8_t>(buf_.get(), front_).data(), front_) &&
           intact(mem_->read_vector<uint8_t>(data() + bytes_, kGuard).data(), kGuard);
  }

 private:
  static bool intact(const uint8_t* guard, size_t bytes) {
    for (size_t i = 0; i < bytes; ++i) {
      if (guard[i] != kGuardByte) return false;
    }
    return true;
  }

  TestMemory* mem_;
  size_t capacity_, bytes_ = 0, front_ = kGuard;
  TestBuffer buf_;
};

}  // namespace symcomm::testing
