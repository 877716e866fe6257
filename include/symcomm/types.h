#pragma once
/// \file types.h
/// Enumerations shared by every part of symcomm: element types, reduction operators, collective kinds,
/// algorithms and backends, with their names and sizes.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace symcomm {

/// The most ranks one communicator may have (one node). Checked at creation.
inline constexpr int kMaxRanks = 64;

/// Element types. 16-bit floats are reduced with float32 accumulation.
enum class DataType : uint8_t { kFloat32, kFloat64, kFloat16, kBFloat16, kInt8, kUInt8, kInt32, kInt64 };
inline constexpr int kNumDataTypes = 8;

/// Reduction operators. kAvg is the sum divided by the world size (integer division for integer types).
enum class ReduceOp : uint8_t { kSum, kProd, kMin, kMax, kAvg };
inline constexpr int kNumReduceOps = 5;

/// Collective operations.
enum class Collective : uint8_t { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kAllToAll, kBarrier };
inline constexpr int kNumCollectives = 6;

/// Algorithms. kAuto lets select() decide; the others force a path (an error if it cannot run the request).
enum class Algorithm : uint8_t {
  kAuto,
  kOneShot,     ///< every rank reads every peer's whole input and reduces it (latency-bound sizes)
  kTwoShot,     ///< reduce-scatter then all-gather (bandwidth-bound sizes)
  kDirect,      ///< gather/scatter style collectives: every rank copies what it needs straight from peers
  kCopyEngine,  ///< data moved by the GPU copy engine (CUDA backend, low contention)
  kNccl,        ///< handed to NCCL (CUDA backend)
};

/// The kernel path a collective ran on (Communicator::last_path()): the variant of its algorithm that the backend
/// executed. select_cuda_path() (src/algos/select.cc) picks it, the same on every rank, from the algorithm, the
/// size, the Tuning and where the buffers lie.
enum class KernelPath : uint8_t {
  kNone,           ///< no collective has run on this communicator yet
  kHost,           ///< the host backend (one path per algorithm)
  kNccl,           ///< handed to NCCL
  kCopyEngine,     ///< copy-engine transfers
  kBarrier,        ///< the barrier kernel
  kLL,             ///< LL lines (flag and data in 8 bytes): one-shot all-reduce, or direct collectives of small blocks
  kLL128,          ///< LL128 lines: one-shot all-reduce
  kOneShotStaged,  ///< one-shot all-reduce through the staging buffer
  kTwoShotStaged,  ///< two-shot all-reduce through the staging buffer
  kTwoShotZeroCopy,  ///< two-shot all-reduce on heap buffers, read and written in place at the peers
  kTwoShotPush,      ///< two-shot all-reduce pushing the reduced blocks into the peers' heap outputs
  kDirectStaged,     ///< reduce-scatter, all-gather, all-to-all or broadcast through the staging buffer
  kDirectZeroCopy,   ///< the same on heap buffers, in place at the peers
  kMultiStaged,      ///< a group's multi-tensor kernel through the staging buffer
  kMultiZeroCopy,    ///< a group's multi-tensor kernel on heap buffers
  kMultiPush,        ///< a group's multi-tensor all-reduce pushing into the peers' heap outputs
  kLL128TwoShot,     ///< LL128 lines: two-shot all-reduce without barriers
  kHostScheduled,    ///< the host backend's all-reduce, all-gather or reduce-scatter over a topology's links
  kScheduled,        ///< the CUDA backend's all-reduce, all-gather or reduce-scatter over a topology's links
};

/// Where the communicator's memory lives.
enum class BackendKind : uint8_t { kHost, kCuda };

/// How a collective should trade speed for interference with compute running beside it.
enum class Contention : uint8_t { kAuto, kLow, kThroughput };

/// Size in bytes of one element.
size_t dtype_size(DataType dtype);

std::string_view to_string(DataType v);
std::string_view to_string(ReduceOp v);
std::string_view to_string(Collective v);
std::string_view to_string(Algorithm v);
std::string_view to_string(BackendKind v);
std::string_view to_string(Contention v);
std::string_view to_string(KernelPath v);

/// Parse the names printed by to_string() (also accepts common aliases: "float"/"f32", "bf16", "half"/"f16",
/// "int", "sum"...). Returns nullopt for an unknown name.
std::optional<DataType> parse_dtype(std::string_view s);
std::optional<ReduceOp> parse_reduce_op(std::string_view s);
std::optional<Collective> parse_collective(std::string_view s);
std::optional<Algorithm> parse_algorithm(std::string_view s);
std::optional<BackendKind> parse_backend(std::string_view s);

/// True for the enum values that exist (casting an integer to an enum does not make it valid).
bool is_valid(DataType v);
bool is_valid(ReduceOp v);
bool is_valid(Collective v);
bool is_valid(Algorithm v);
bool is_valid(BackendKind v);
bool is_valid(Contention v);

}  // namespace symcomm
