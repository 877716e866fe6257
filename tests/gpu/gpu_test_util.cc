#include "gpu_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "algos/elements.h"

namespace symcomm::gputest {

int64_t input_value(DataType dt, ReduceOp op, uint64_t seed, int rank, size_t i) {
  uint64_t h = (i * 2654435761ull + seed * 40503ull + static_cast<uint64_t>(rank) * 977ull) >> 3;
  int64_t b = static_cast<int64_t>(h % 7) + 1;  // 1..7
  if (op == ReduceOp::kProd) return b % 2 + 1;  // 1..2
  return dt == DataType::kUInt8 ? b : b - 3;    // -2..4 for signed types
}

void encode(DataType dt, int64_t v, void* dst) { detail::store_element(dt, dst, 0, static_cast<double>(v)); }

void expected_reduce(DataType dt, ReduceOp op, uint64_t seed, int world, size_t i, void* dst) {
  const bool is_float =
      dt == DataType::kFloat32 || dt == DataType::kFloat64 || dt == DataType::kFloat16 || dt == DataType::kBFloat16;
  int64_t acc = input_value(dt, op, seed, 0, i);
  for (int r = 1; r < world; ++r) {
    int64_t v = input_value(dt, op, seed, r, i);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: acc += v; break;
      case ReduceOp::kProd: acc *= v; break;
      case ReduceOp::kMin: acc = v < acc ? v : acc; break;
      case ReduceOp::kMax: acc = v > acc ? v : acc; break;
    }
  }
  if (op != ReduceOp::kAvg) return encode(dt, acc, dst);
  if (is_float) {
    double avg = static_cast<double>(acc) / world;  // exact: a small integer over 2, 4 or 8
    switch (dt) {
      case DataType::kFloat32: {
        float f = static_cast<float>(avg);
        std::memcpy(dst, &f, 4);
        return;
      }
      case DataType::kFloat64: std::memcpy(dst, &avg, 8); return;
      case DataType::kFloat16: {
        uint16_t b = detail::float_to_half(static_cast<float>(avg));
        std::memcpy(dst, &b, 2);
        return;
      }
      default: {
        uint16_t b = detail::float_to_bf16(static_cast<float>(avg));
        std::memcpy(dst, &b, 2);
        return;
      }
    }
  }
  // Integers: the wrapped sum in the dtype, then truncating division (host_reduce's semantics).
  uint8_t tmp[8];
  encode(dt, acc, tmp);
  int64_t wrapped = 0;
  switch (dt) {
    case DataType::kInt8: wrapped = *reinterpret_cast<int8_t*>(tmp); break;
    case DataType::kUInt8: wrapped = *reinterpret_cast<uint8_t*>(tmp); break;
    case DataType::kInt32: {
      int32_t x;
      std::memcpy(&x, tmp, 4);
      wrapped = x;
      break;
    }
    default: std::memcpy(&wrapped, tmp, 8); break;
  }
  encode(dt, wrapped / world, dst);
}

std::vector<uint8_t> make_input(DataType dt, ReduceOp op, uint64_t seed, int rank, size_t first, size_t count) {
  size_t es = dtype_size(dt);
  std::vector<uint8_t> v(count * es);
  for (size_t i = 0; i < count; ++i) encode(dt, input_value(dt, op, seed, rank, first + i), v.data() + i * es);
  return v;
}

GuardedBuffer::GuardedBuffer(Communicator& comm, BufKind kind, size_t capacity)
    : comm_(comm), kind_(kind), capacity_(capacity + 2 * kGuard + 64) {
  if (kind_ == BufKind::kSymmetric) {
    base_ = static_cast<char*>(comm_.alloc(capacity_));
  } else if (cudaMalloc(reinterpret_cast<void**>(&base_), capacity_) != cudaSuccess) {
    base_ = nullptr;
  }
}

GuardedBuffer::~GuardedBuffer() {
  if (!base_) return;
  if (kind_ == BufKind::kSymmetric) {
    comm_.free(base_);
  } else {
    cudaFree(base_);
  }
}

char* GuardedBuffer::prepare(size_t offset, size_t bytes, uint8_t fill) {
  cudaMemset(base_, kGuardByte, capacity_);
  char* p = base_ + kGuard + offset;
  if (bytes) cudaMemset(p, fill, bytes);
  cudaDeviceSynchronize();
  return p;
}

std::vector<uint8_t> GuardedBuffer::read(const char* ptr, size_t bytes, bool* guards_ok) {
  // Only the payload and its two guards travel back.
  const char* lo = ptr - kGuard;
  size_t span = std::min(bytes + 2 * kGuard, capacity_ - static_cast<size_t>(lo - base_));
  std::vector<uint8_t> win(span);
  cudaMemcpy(win.data(), lo, span, cudaMemcpyDeviceToHost);
  *guards_ok = true;
  for (size_t i = 0; i < kGuard; ++i) *guards_ok = *guards_ok && win[i] == kGuardByte;
  for (size_t i = kGuard + bytes; i < span; ++i) *guards_ok = *guards_ok && win[i] == kGuardByte;
  return std::vector<uint8_t>(win.begin() + kGuard, win.begin() + kGuard + bytes);
}

void expect_gpu_usable() {
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1 << 20), cudaSuccess);
  fill_input_async(p, DataType::kFloat32, ReduceOp::kSum, 7, 0, 1000, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  float v = 0;
  ASSERT_EQ(cudaMemcpy(&v, p, 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(v, static_cast<float>(input_value(DataType::kFloat32, ReduceOp::kSum, 7, 0, 0)));
  cudaFree(p);
}

size_t count_wrong_sum(const float* dev, size_t count, uint64_t seed, int world, size_t first) {
  std::vector<float> got(count);
  if (cudaMemcpy(got.data(), dev, count * 4, cudaMemcpyDeviceToHost) != cudaSuccess) return count;
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    expected_reduce(DataType::kFloat32, ReduceOp::kSum, seed, world, first + i, &want);
    wrong += got[i] != want;
  }
  return wrong;
}

bool ranks_share_gpus() { return Config::from_env().shared_gpu; }

int rank_device(int local_rank) {
  int devices = 0;
  if (!ranks_share_gpus() || cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) return local_rank;
  return local_rank % devices;
}

}  // namespace symcomm::gputest
