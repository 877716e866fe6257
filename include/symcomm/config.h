#pragma once
/// \file config.h
/// Every tunable of symcomm lives in one typed struct. Config::from_env() fills it from the SYMCOMM_*
/// environment variables (one table in src/core/config.cc; `symcomm-run --help-env` prints it); a bad value
/// is an Error(kInvalidArgument) naming the variable. Tests build a Config directly instead of touching the
/// environment.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace symcomm {

enum class LogLevel : uint8_t { kOff, kError, kWarn, kInfo, kDebug };

/// Thresholds used by the pure selection function (src/algos/select.cc). Each field documents where its
/// default was measured.
struct Tuning {
  /// Host backend: all-reduce payloads up to this many bytes use one-shot, larger ones two-shot.
  size_t host_one_shot_max_bytes = 64 * 1024;
  /// CUDA backend: all-reduce payloads up to this many bytes use one-shot.
  size_t cuda_one_shot_max_bytes = 256 * 1024;
  /// CUDA backend: all-reduce payloads up to this many bytes use two-shot; larger ones go to NCCL when
  /// NCCL is available (two-shot otherwise).
  size_t cuda_two_shot_max_bytes = SIZE_MAX;
  /// CUDA backend: payloads at least this large go to NCCL when it is available (SIZE_MAX = never).
  size_t cuda_nccl_min_bytes = SIZE_MAX;
};

struct Config {
  /// Deadline of every wait (host waits, device spin loops, store requests).
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  /// Bytes of symmetric heap each rank reserves for alloc() (host backend: virtual, committed on touch).
  size_t heap_bytes = size_t{1} << 30;
  /// Bytes of staging memory per rank used when a collective's buffers are not in the symmetric heap.
  /// Large collectives are processed in rounds of at most half of this.
  size_t scratch_bytes = size_t{16} << 20;
  /// Log verbosity (stderr).
  LogLevel log_level = LogLevel::kWarn;
  /// Exchange each collective's arguments through the store before running it and report mismatches
  /// field by field (slow; for debugging).
  bool debug_checks = false;
  /// How many recent operations each communicator remembers for the dump on error.
  int op_history = 64;
  Tuning tuning;

  /// Read SYMCOMM_* variables over the defaults. Throws Error(kInvalidArgument) on a malformed value.
  static Config from_env();
  /// One line per variable: name, current default, meaning.
  static std::string env_help();
};

}  // namespace symcomm
