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
  void write(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void read(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void set(void* dst, uint8_t byte, size_t bytes) override { std::memset(dst, byte, bytes); }
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

}  // namespace symcomm::testing
