// Tests of Config::from_env() and Tuning::validate() (src/core/config.cc) and Rendezvous::from_env()
// (src/bootstrap/rendezvous.cc).
// Every environment variable a test touches goes through ScopedEnv (harness/scoped_env.h), which restores the
// previous value (or unsets it again) when the test ends, pass or fail.

#include "symcomm/config.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "algos/select.h"
#include "base/logging.h"
#include "base/op_history.h"
#include "core/tuning_file.h"
#include "harness/scoped_env.h"
#include "harness/temp_files.h"
#include "symcomm/communicator.h"
#include "symcomm/error.h"
#include "symcomm/store.h"

namespace symcomm {
namespace {

using testing::ScopedEnv;
using testing::ScopedEnvSet;

const std::vector<std::string> kConfigVars = {
    "SYMCOMM_TIMEOUT_MS",
    "SYMCOMM_HEAP_BYTES",
    "SYMCOMM_SCRATCH_BYTES",
    "SYMCOMM_CUDA_SCRATCH_BYTES",
    "SYMCOMM_P2P_CHUNK_BYTES",
    "SYMCOMM_LOG",
    "SYMCOMM_DEBUG_CHECKS",
    "SYMCOMM_NCCL",
    "SYMCOMM_SHARED_GPU",
    "SYMCOMM_DEBUG_SEQ_START",
    "SYMCOMM_DEBUG_SIGNAL_LAG",
    "SYMCOMM_OP_HISTORY",
    "SYMCOMM_TRACE_DIR",
    "SYMCOMM_TUNING_FILE",
    "SYMCOMM_TOPOLOGY_FILE",
    "SYMCOMM_HOST_ONE_SHOT_MAX_BYTES",
    "SYMCOMM_CUDA_ONE_SHOT_MAX_BYTES",
    "SYMCOMM_CUDA_TWO_SHOT_MAX_BYTES",
    "SYMCOMM_CUDA_TWO_SHOT_PUSH_MIN_BYTES",
    "SYMCOMM_CUDA_TWO_SHOT_MAX_BLOCKS",
    "SYMCOMM_CUDA_TWO_SHOT_BLOCK_BYTES",
    "SYMCOMM_CUDA_DIRECT_BLOCK_BYTES",
    "SYMCOMM_CUDA_DIRECT_MAX_BLOCKS",
    "SYMCOMM_CUDA_NCCL_MIN_BYTES",
    "SYMCOMM_CUDA_DIRECT_NCCL_MAX_BYTES",
    "SYMCOMM_CUDA_LL_CHUNKS_PER_THREAD",
    "SYMCOMM_CUDA_LL_MAX_BLOCKS",
    "SYMCOMM_CUDA_LL_BLOCK_THREADS",
    "SYMCOMM_CUDA_LL_MAX_BYTES",
    "SYMCOMM_CUDA_LL_GATHER_MAX_BYTES",
    "SYMCOMM_CUDA_ONE_SHOT_BLOCK_BYTES",
    "SYMCOMM_CUDA_ONE_SHOT_MAX_BLOCKS",
    "SYMCOMM_CUDA_LL128_MAX_BYTES",
    "SYMCOMM_CUDA_LL128_LINES_PER_GROUP",
    "SYMCOMM_CUDA_LL128_MAX_BLOCKS",
    "SYMCOMM_CUDA_LL128_TWO_SHOT_MAX_BYTES",
    "SYMCOMM_CUDA_LL128_GATHER_MAX_BYTES",
    "SYMCOMM_CUDA_LL128_REDUCE_SCATTER_MAX_BYTES",
    "SYMCOMM_CUDA_PDL",
};

// Every SYMCOMM_* configuration variable unset, except those given.
ScopedEnvSet config_env(const std::vector<std::pair<std::string, std::string>>& set = {}) {
  std::vector<std::pair<std::string, std::optional<std::string>>> vars;
  for (const std::string& name : kConfigVars) {
    std::optional<std::string> value;
    for (const auto& [n, v] : set) {
      if (n == name) value = v;
    }
    vars.emplace_back(name, value);
  }
  return ScopedEnvSet(vars);
}

// Config::from_env() with one variable set and all others unset.
Config config_with(const std::string& name, const std::string& value) {
  auto env = config_env({{name, value}});
  return Config::from_env();
}

// The Error thrown by f (kInternal with "no error" if it returns).
template <class F>
Error error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  return Error(ErrorCode::kInternal, "no error");
}

TEST(ScopedEnv, RestoresPreviousValueOrUnsets) {
  const char* kName = "SYMCOMM_TEST_SCOPED_ENV_VARIABLE";
  ASSERT_EQ(std::getenv(kName), nullptr);
  {
    ScopedEnv a(kName, "one");
    EXPECT_STREQ(std::getenv(kName), "one");
    {
      ScopedEnv b(kName, "two");
      EXPECT_STREQ(std::getenv(kName), "two");
      {
        ScopedEnv c(kName, std::nullopt);
        EXPECT_EQ(std::getenv(kName), nullptr);
      }
      EXPECT_STREQ(std::getenv(kName), "two");
    }
    EXPECT_STREQ(std::getenv(kName), "one");
  }
  EXPECT_EQ(std::getenv(kName), nullptr);
}

TEST(ConfigFromEnv, EveryVariableIsInTheHelpAndTheTestList) {
  std::string help = Config::env_help();
  for (const std::string& name : kConfigVars) EXPECT_NE(help.find(name), std::string::npos) << name;
  // The help has one line per variable: a variable added to the table must be added to kConfigVars.
  EXPECT_EQ(static_cast<size_t>(std::count(help.begin(), help.end(), '\n')), kConfigVars.size()) << help;
}

// Config::settings() is what ranks compare at creation (NOTE [configuration agreement]): one entry per
// variable, spelled as the environment would be, so that reading the settings back gives the same Config.
TEST(ConfigFromEnv, SettingsNameEveryVariableAndReadBack) {
  Config c;
  c.tuning.cuda_two_shot_max_blocks = 132;
  c.debug_checks = true;
  c.log_level = LogLevel::kDebug;
  const auto settings = c.settings();
  ASSERT_EQ(settings.size(), kConfigVars.size());
  std::vector<std::pair<std::string, std::string>> as_env;
  for (size_t i = 0; i < settings.size(); ++i) {
    EXPECT_NE(std::find(kConfigVars.begin(), kConfigVars.end(), settings[i].first), kConfigVars.end())
        << settings[i].first;
    as_env.emplace_back(settings[i].first, settings[i].second);
  }
  auto env = config_env(as_env);
  const Config back = Config::from_env();
  EXPECT_EQ(back.settings(), settings);
  EXPECT_EQ(back.tuning.cuda_two_shot_max_blocks, 132u);
  EXPECT_TRUE(back.debug_checks);
  EXPECT_EQ(back.log_level, LogLevel::kDebug);
  EXPECT_NE(Config().settings(), settings);
}

TEST(ConfigFromEnv, DefaultsWhenNothingIsSet) {
  auto env = config_env();
  Config c = Config::from_env();
  EXPECT_EQ(c.timeout, std::chrono::milliseconds(300000));
  EXPECT_EQ(c.heap_bytes, size_t{1} << 30);
  EXPECT_EQ(c.scratch_bytes, size_t{2} << 20);
  EXPECT_EQ(c.cuda_scratch_bytes, size_t{128} << 20);
  EXPECT_EQ(c.log_level, LogLevel::kWarn);
  EXPECT_FALSE(c.debug_checks);
  EXPECT_EQ(c.op_history, 64);
  EXPECT_EQ(c.trace_dir, "");
  EXPECT_EQ(c.nccl, NcclInit::kEager);
  EXPECT_EQ(c.tuning.host_one_shot_max_bytes, size_t{64} << 10);
  EXPECT_EQ(c.tuning.cuda_one_shot_max_bytes, size_t{4} << 20);
  EXPECT_EQ(c.tuning.cuda_direct_nccl_max_bytes, size_t{0});
  EXPECT_EQ(c.tuning.cuda_two_shot_max_bytes, SIZE_MAX);
  EXPECT_EQ(c.tuning.cuda_nccl_min_bytes, SIZE_MAX);
}

TEST(ConfigFromEnv, EmptyValueMeansUnset) {
  for (const std::string& name : kConfigVars) {
    SCOPED_TRACE(name);
    Config c = config_with(name, "");
    Config d;
    EXPECT_EQ(c.timeout, d.timeout);
    EXPECT_EQ(c.heap_bytes, d.heap_bytes);
    EXPECT_EQ(c.log_level, d.log_level);
    EXPECT_EQ(c.tuning.host_one_shot_max_bytes, d.tuning.host_one_shot_max_bytes);
  }
}

TEST(ConfigFromEnv, SizesWithSuffixes) {
  struct Case {
    const char* name;
    const char* value;
    size_t want;
    std::function<size_t(const Config&)> field;
  };
  auto heap = [](const Config& c) { return c.heap_bytes; };
  auto scratch = [](const Config& c) { return c.scratch_bytes; };
  auto cuda_scratch = [](const Config& c) { return c.cuda_scratch_bytes; };
  auto p2p_chunk = [](const Config& c) { return c.p2p_chunk_bytes; };
  auto host1 = [](const Config& c) { return c.tuning.host_one_shot_max_bytes; };
  auto cuda1 = [](const Config& c) { return c.tuning.cuda_one_shot_max_bytes; };
  auto cuda2 = [](const Config& c) { return c.tuning.cuda_two_shot_max_bytes; };
  auto nccl = [](const Config& c) { return c.tuning.cuda_nccl_min_bytes; };
  const Case cases[] = {
      {"SYMCOMM_HEAP_BYTES", "2097152", 2097152, heap},
      {"SYMCOMM_HEAP_BYTES", "4M", size_t{4} << 20, heap},
      {"SYMCOMM_HEAP_BYTES", "4m", size_t{4} << 20, heap},
      {"SYMCOMM_HEAP_BYTES", "2048K", size_t{2} << 20, heap},
      {"SYMCOMM_HEAP_BYTES", "2048k", size_t{2} << 20, heap},
      {"SYMCOMM_HEAP_BYTES", "2G", size_t{2} << 30, heap},
      {"SYMCOMM_HEAP_BYTES", "3g", size_t{3} << 30, heap},
      {"SYMCOMM_HEAP_BYTES", "1M", size_t{1} << 20, heap},  // the minimum
      {"SYMCOMM_HEAP_BYTES", "0001M", size_t{1} << 20, heap},
      {"SYMCOMM_SCRATCH_BYTES", "64K", size_t{64} << 10, scratch},  // the minimum
      {"SYMCOMM_SCRATCH_BYTES", "100000", 100000, scratch},
      {"SYMCOMM_CUDA_SCRATCH_BYTES", "256M", size_t{256} << 20, cuda_scratch},
      {"SYMCOMM_P2P_CHUNK_BYTES", "4K", size_t{4} << 10, p2p_chunk},  // the minimum
      {"SYMCOMM_P2P_CHUNK_BYTES", "1M", size_t{1} << 20, p2p_chunk},
      {"SYMCOMM_HOST_ONE_SHOT_MAX_BYTES", "0", 0, host1},
      {"SYMCOMM_HOST_ONE_SHOT_MAX_BYTES", "1K", 1024, host1},
      {"SYMCOMM_HOST_ONE_SHOT_MAX_BYTES", "12345", 12345, host1},
      {"SYMCOMM_CUDA_ONE_SHOT_MAX_BYTES", "512K", size_t{512} << 10, cuda1},
      {"SYMCOMM_CUDA_TWO_SHOT_MAX_BYTES", "1G", size_t{1} << 30, cuda2},
      {"SYMCOMM_CUDA_NCCL_MIN_BYTES", "8M", size_t{8} << 20, nccl},
      {"SYMCOMM_CUDA_NCCL_MIN_BYTES", "18446744073709551615", SIZE_MAX, nccl},
      // The largest multiple of 1 GiB below 2^64.
      {"SYMCOMM_CUDA_NCCL_MIN_BYTES", "17179869183G", SIZE_MAX - (size_t{1} << 30) + 1, nccl},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{}={}", c.name, c.value));
    EXPECT_EQ(c.field(config_with(c.name, c.value)), c.want);
  }
}

// SYMCOMM_TRACE_DIR: the directory of the operation record files (NOTE [op record] in
// src/backends/comm_context.cc), taken as given; empty, $TMPDIR, and /tmp where TMPDIR is unset or empty.
TEST(ConfigFromEnv, TraceDirectoryAndItsDefault) {
  EXPECT_EQ(config_with("SYMCOMM_TRACE_DIR", "/var/tmp/records").trace_dir, "/var/tmp/records");
  EXPECT_EQ(config_with("SYMCOMM_TRACE_DIR", "relative dir").trace_dir, "relative dir");
  Config given;
  given.trace_dir = "/var/tmp/records";
  {
    ScopedEnv tmp("TMPDIR", "/scratch/someone");
    EXPECT_EQ(detail::trace_dir_of(Config()), "/scratch/someone");
    EXPECT_EQ(detail::trace_dir_of(given), "/var/tmp/records");
  }
  {
    ScopedEnv tmp("TMPDIR", "");
    EXPECT_EQ(detail::trace_dir_of(Config()), "/tmp");
  }
  {
    ScopedEnv tmp("TMPDIR", std::nullopt);
    EXPECT_EQ(detail::trace_dir_of(Config()), "/tmp");
  }
}

TEST(ConfigFromEnv, TimeoutOpHistoryBooleansAndLogLevels) {
  EXPECT_EQ(config_with("SYMCOMM_TIMEOUT_MS", "1500").timeout, std::chrono::milliseconds(1500));
  EXPECT_EQ(config_with("SYMCOMM_TIMEOUT_MS", "1").timeout, std::chrono::milliseconds(1));
  EXPECT_EQ(config_with("SYMCOMM_OP_HISTORY", "1").op_history, 1);
  EXPECT_EQ(config_with("SYMCOMM_OP_HISTORY", "1000").op_history, 1000);
  for (const char* v : {"1", "true", "yes", "on"}) {
    EXPECT_TRUE(config_with("SYMCOMM_DEBUG_CHECKS", v).debug_checks) << v;
    EXPECT_TRUE(config_with("SYMCOMM_SHARED_GPU", v).shared_gpu) << v;
  }
  for (const char* v : {"0", "false", "no", "off"}) {
    EXPECT_FALSE(config_with("SYMCOMM_DEBUG_CHECKS", v).debug_checks) << v;
    EXPECT_FALSE(config_with("SYMCOMM_SHARED_GPU", v).shared_gpu) << v;
  }
  EXPECT_FALSE(Config{}.shared_gpu);
  const std::pair<const char*, LogLevel> levels[] = {
      {"off", LogLevel::kOff},      {"none", LogLevel::kOff},  {"error", LogLevel::kError}, {"warn", LogLevel::kWarn},
      {"warning", LogLevel::kWarn}, {"info", LogLevel::kInfo}, {"debug", LogLevel::kDebug}, {"trace", LogLevel::kDebug},
  };
  for (const auto& [v, level] : levels) EXPECT_EQ(config_with("SYMCOMM_LOG", v).log_level, level) << v;
  EXPECT_EQ(config_with("SYMCOMM_NCCL", "eager").nccl, NcclInit::kEager);
  EXPECT_EQ(config_with("SYMCOMM_NCCL", "lazy").nccl, NcclInit::kLazy);
  EXPECT_EQ(config_with("SYMCOMM_NCCL", "off").nccl, NcclInit::kOff);
}

TEST(ConfigFromEnv, SeveralVariablesTogether) {
  auto env = config_env({{"SYMCOMM_TIMEOUT_MS", "2500"},
                         {"SYMCOMM_HEAP_BYTES", "64M"},
                         {"SYMCOMM_LOG", "debug"},
                         {"SYMCOMM_DEBUG_CHECKS", "yes"},
                         {"SYMCOMM_HOST_ONE_SHOT_MAX_BYTES", "4K"}});
  Config c = Config::from_env();
  EXPECT_EQ(c.timeout, std::chrono::milliseconds(2500));
  EXPECT_EQ(c.heap_bytes, size_t{64} << 20);
  EXPECT_EQ(c.log_level, LogLevel::kDebug);
  EXPECT_TRUE(c.debug_checks);
  EXPECT_EQ(c.tuning.host_one_shot_max_bytes, 4096u);
  EXPECT_EQ(c.scratch_bytes, Config{}.scratch_bytes);  // untouched
}

// A malformed value is Error(kInvalidArgument) and its message names the variable.
void expect_rejected(const std::string& name, const std::string& value) {
  SCOPED_TRACE(fmt::format("{}='{}'", name, value));
  auto env = config_env({{name, value}});
  Error e = error_of([] { Config::from_env(); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
  EXPECT_NE(e.message().find(name), std::string::npos) << e.message();
}

TEST(ConfigFromEnv, MalformedValuesNameTheVariable) {
  const char* kSizeVars[] = {"SYMCOMM_HEAP_BYTES",
                             "SYMCOMM_SCRATCH_BYTES",
                             "SYMCOMM_CUDA_SCRATCH_BYTES",
                             "SYMCOMM_P2P_CHUNK_BYTES",
                             "SYMCOMM_OP_HISTORY",
                             "SYMCOMM_TIMEOUT_MS",
                             "SYMCOMM_HOST_ONE_SHOT_MAX_BYTES",
                             "SYMCOMM_CUDA_ONE_SHOT_MAX_BYTES",
                             "SYMCOMM_CUDA_TWO_SHOT_MAX_BYTES",
                             "SYMCOMM_CUDA_NCCL_MIN_BYTES"};
  for (const char* name : kSizeVars) {
    for (const char* bad : {"abc", "12x", "-1", "+5", " 12", "12 ", "1.5M", "K", "M", "0x10", "4MB", "4 M", "1e3",
                            "18446744073709551616", "17179869184G"}) {
      expect_rejected(name, bad);
    }
  }
  for (const char* bad : {"2", "y", "TRUE", "True", "enable", " 1"}) {
    expect_rejected("SYMCOMM_DEBUG_CHECKS", bad);
    expect_rejected("SYMCOMM_SHARED_GPU", bad);
  }
  for (const char* bad : {"verbose", "WARN", "Info", "3", "warn "}) expect_rejected("SYMCOMM_LOG", bad);
  for (const char* bad : {"on", "1", "Lazy", "none", "eager "}) expect_rejected("SYMCOMM_NCCL", bad);
}

TEST(ConfigFromEnv, ValuesBelowTheMinimumNameTheVariable) {
  expect_rejected("SYMCOMM_TIMEOUT_MS", "0");
  expect_rejected("SYMCOMM_HEAP_BYTES", "1048575");
  expect_rejected("SYMCOMM_HEAP_BYTES", "1023K");
  expect_rejected("SYMCOMM_SCRATCH_BYTES", "65535");
  expect_rejected("SYMCOMM_P2P_CHUNK_BYTES", "4095");
  expect_rejected("SYMCOMM_OP_HISTORY", "0");
}

// Values that fit uint64 but not the field they set must not wrap around into something else (a negative or
// zero timeout, an op history of 0 or below).
TEST(ConfigFromEnv, ValuesTooLargeForTheFieldAreRejected) {
  expect_rejected("SYMCOMM_OP_HISTORY", "2147483648");           // INT_MAX + 1
  expect_rejected("SYMCOMM_OP_HISTORY", "4294967296");           // 2^32: would become 0
  expect_rejected("SYMCOMM_TIMEOUT_MS", "9223372036854775808");  // 2^63: would become negative
  expect_rejected("SYMCOMM_TIMEOUT_MS", "18446744073709551615");
  expect_rejected("SYMCOMM_DEBUG_SEQ_START", "4294967296");  // the counter is 32 bits
  // A slot 2^31 or more behind the counter reads as already reached (NOTE [signal refresh]).
  expect_rejected("SYMCOMM_DEBUG_SIGNAL_LAG", "2147483648");
}

TEST(ConfigFromEnv, SequenceTestingKnobsTakeTheirWholeRange) {
  EXPECT_EQ(config_with("SYMCOMM_DEBUG_SEQ_START", "4294967295").debug_seq_start, 0xffffffffu);
  EXPECT_EQ(config_with("SYMCOMM_DEBUG_SIGNAL_LAG", "2147483647").debug_signal_lag, 0x7fffffffu);
  EXPECT_EQ(Config().debug_seq_start, 0u);
  EXPECT_EQ(Config().debug_signal_lag, 0u);
}

// --- Tuning ranges (NOTE [tuning ranges] in src/core/config.cc) ----------------------------------------------

// One Tuning field with a range: the values at its edges (accepted) and just outside them (refused), and how
// the message spells the range.
struct TuningRange {
  const char* field;
  const char* env;
  size_t Tuning::*member;
  std::vector<size_t> accepted;
  std::vector<size_t> refused;
  const char* range;
};

constexpr size_t kMiB = size_t{1} << 20;

const std::vector<TuningRange> kTuningRanges = {
    {"cuda_ll_chunks_per_thread",
     "SYMCOMM_CUDA_LL_CHUNKS_PER_THREAD",
     &Tuning::cuda_ll_chunks_per_thread,
     {1, 64},
     {0, 65},
     "1-64"},
    {"cuda_ll_max_blocks", "SYMCOMM_CUDA_LL_MAX_BLOCKS", &Tuning::cuda_ll_max_blocks, {1, 1024}, {0, 1025}, "1-1024"},
    {"cuda_ll_block_threads",
     "SYMCOMM_CUDA_LL_BLOCK_THREADS",
     &Tuning::cuda_ll_block_threads,
     {32, 64, 480, 512},
     {0, 31, 33, 500, 511, 513, 544},
     "a multiple of 32 in 32-512"},
    {"cuda_ll_max_bytes",
     "SYMCOMM_CUDA_LL_MAX_BYTES",
     &Tuning::cuda_ll_max_bytes,
     {0, kMiB},
     {kMiB + 1, SIZE_MAX},
     "0-1048576"},
    {"cuda_ll_gather_max_bytes",
     "SYMCOMM_CUDA_LL_GATHER_MAX_BYTES",
     &Tuning::cuda_ll_gather_max_bytes,
     {0, kMiB},
     {kMiB + 1},
     "0-1048576"},
    {"cuda_one_shot_block_bytes",
     "SYMCOMM_CUDA_ONE_SHOT_BLOCK_BYTES",
     &Tuning::cuda_one_shot_block_bytes,
     {16, SIZE_MAX},
     {0, 15},
     "16 or more"},
    {"cuda_one_shot_max_blocks",
     "SYMCOMM_CUDA_ONE_SHOT_MAX_BLOCKS",
     &Tuning::cuda_one_shot_max_blocks,
     {1, 256},
     {0, 257},
     "1-256"},
    {"cuda_two_shot_max_blocks",
     "SYMCOMM_CUDA_TWO_SHOT_MAX_BLOCKS",
     &Tuning::cuda_two_shot_max_blocks,
     {0, 1, 256},
     {257},
     "0 or 1-256"},
    {"cuda_two_shot_block_bytes",
     "SYMCOMM_CUDA_TWO_SHOT_BLOCK_BYTES",
     &Tuning::cuda_two_shot_block_bytes,
     {16, SIZE_MAX},
     {0, 15},
     "16 or more"},
    {"cuda_direct_block_bytes",
     "SYMCOMM_CUDA_DIRECT_BLOCK_BYTES",
     &Tuning::cuda_direct_block_bytes,
     {16, SIZE_MAX},
     {0, 15},
     "16 or more"},
    {"cuda_direct_max_blocks",
     "SYMCOMM_CUDA_DIRECT_MAX_BLOCKS",
     &Tuning::cuda_direct_max_blocks,
     {1, 256},
     {0, 257},
     "1-256"},
    {"cuda_ll128_max_bytes",
     "SYMCOMM_CUDA_LL128_MAX_BYTES",
     &Tuning::cuda_ll128_max_bytes,
     {0, 4 * kMiB},
     {4 * kMiB + 1},
     "0-4194304"},
    {"cuda_ll128_lines_per_group",
     "SYMCOMM_CUDA_LL128_LINES_PER_GROUP",
     &Tuning::cuda_ll128_lines_per_group,
     {1, 64},
     {0, 65},
     "1-64"},
    {"cuda_ll128_max_blocks",
     "SYMCOMM_CUDA_LL128_MAX_BLOCKS",
     &Tuning::cuda_ll128_max_blocks,
     {1, 1024},
     {0, 1025},
     "1-1024"},
    {"cuda_ll128_two_shot_max_bytes",
     "SYMCOMM_CUDA_LL128_TWO_SHOT_MAX_BYTES",
     &Tuning::cuda_ll128_two_shot_max_bytes,
     {0, 16 * kMiB},
     {16 * kMiB + 1},
     "0-16777216"},
    {"cuda_ll128_gather_max_bytes",
     "SYMCOMM_CUDA_LL128_GATHER_MAX_BYTES",
     &Tuning::cuda_ll128_gather_max_bytes,
     {0, 4 * kMiB},
     {4 * kMiB + 1},
     "0-4194304"},
    {"cuda_ll128_reduce_scatter_max_bytes",
     "SYMCOMM_CUDA_LL128_REDUCE_SCATTER_MAX_BYTES",
     &Tuning::cuda_ll128_reduce_scatter_max_bytes,
     {0, 4 * kMiB},
     {4 * kMiB + 1},
     "0-4194304"},
    {"cuda_pdl", "SYMCOMM_CUDA_PDL", &Tuning::cuda_pdl, {0, 1}, {2, SIZE_MAX}, "0-1"},
};

// The byte thresholds of select(): every value means something (0: never, SIZE_MAX: always).
const std::vector<size_t Tuning::*> kUnboundedTuning = {
    &Tuning::host_one_shot_max_bytes,      &Tuning::cuda_one_shot_max_bytes, &Tuning::cuda_two_shot_max_bytes,
    &Tuning::cuda_two_shot_push_min_bytes, &Tuning::cuda_nccl_min_bytes,     &Tuning::cuda_direct_nccl_max_bytes,
};

// The refusal names the field, its variable and the range, with kInvalidArgument.
void expect_range_error(const Error& e, const TuningRange& r) {
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
  EXPECT_NE(e.message().find(r.field), std::string::npos) << e.message();
  EXPECT_NE(e.message().find(r.env), std::string::npos) << e.message();
  EXPECT_NE(e.message().find(r.range), std::string::npos) << e.message();
}

// A one-rank host communicator over a store of its own, with `config`.
class OneRankComm {
 public:
  OneRankComm() {
    server_ = StoreServer::start({.host = "127.0.0.1", .port = 0, .token = "tuning-test", .limits = {}});
    store_ = Store::connect({.host = "127.0.0.1", .port = server_->port(), .token = "tuning-test"});
  }
  std::unique_ptr<Communicator> create(const Config& config) {
    CommOptions o;
    o.config = config;
    return Communicator::create(store_, RankInfo{}, o);
  }

 private:
  std::unique_ptr<StoreServer> server_;
  std::shared_ptr<Store> store_;
};

Config small_config(const Tuning& t) {
  Config c;
  c.heap_bytes = size_t{1} << 20;
  c.scratch_bytes = size_t{64} << 10;
  c.timeout = std::chrono::seconds(10);
  c.tuning = t;
  return c;
}

TEST(TuningRanges, DefaultsAndMeasuredValuesAreAccepted) {
  EXPECT_NO_THROW(Tuning{}.validate());
  // The values measured per world size (NOTE [measured CUDA thresholds]) replace fields left at default.
  for (int n = 1; n <= 8; ++n) EXPECT_NO_THROW(detail::measured_cuda_tuning(Tuning{}, n).validate()) << n;
  auto env = config_env();
  EXPECT_NO_THROW(Config::from_env().tuning.validate());
  OneRankComm comms;
  EXPECT_NO_THROW(comms.create(small_config(Tuning{})));
}

TEST(TuningRanges, LLBlocksHave256ThreadsFromThreeRanksOnUnlessSet) {
  for (int n = 1; n <= 8; ++n) {
    const Tuning m = detail::measured_cuda_tuning(Tuning{}, n);
    EXPECT_EQ(m.cuda_ll_block_threads, n >= 3 ? 256u : Tuning{}.cuda_ll_block_threads) << n;
    EXPECT_EQ(m.cuda_ll_max_blocks, n >= 3 ? 256u : Tuning{}.cuda_ll_max_blocks) << n;
  }
  // A value that differs from the default is the caller's: the per-world-size table leaves it.
  Tuning set;
  set.cuda_ll_block_threads = 128;
  EXPECT_EQ(detail::measured_cuda_tuning(set, 4).cuda_ll_block_threads, 128u);
}

TEST(TuningRanges, ValuesOutsideTheRangeAreRefusedNamingFieldVariableAndRange) {
  for (const TuningRange& r : kTuningRanges) {
    for (size_t v : r.refused) {
      SCOPED_TRACE(fmt::format("{} = {}", r.field, v));
      Tuning t;
      t.*r.member = v;
      expect_range_error(error_of([&] { t.validate(); }), r);
      auto env = config_env({{r.env, std::to_string(v)}});
      expect_range_error(error_of([] { Config::from_env(); }), r);
    }
  }
}

TEST(TuningRanges, ValuesAtTheEdgesOfTheRangeAreAccepted) {
  for (const TuningRange& r : kTuningRanges) {
    for (size_t v : r.accepted) {
      SCOPED_TRACE(fmt::format("{} = {}", r.field, v));
      Tuning t;
      t.*r.member = v;
      EXPECT_NO_THROW(t.validate());
      EXPECT_EQ(config_with(r.env, std::to_string(v)).tuning.*r.member, v);
    }
  }
  for (size_t Tuning::*member : kUnboundedTuning) {
    for (size_t v : {size_t{0}, size_t{1}, SIZE_MAX}) {
      Tuning t;
      t.*member = v;
      EXPECT_NO_THROW(t.validate()) << v;
    }
  }
}

// Communicator::create() checks a Config built in code (unchecked, it would reach the kernels, which clamp it).
TEST(TuningRanges, CommunicatorCreationRefusesValuesOutsideTheRange) {
  OneRankComm comms;
  for (const TuningRange& r : kTuningRanges) {
    SCOPED_TRACE(r.field);
    Tuning t;
    t.*r.member = r.refused.front();
    expect_range_error(error_of([&] { comms.create(small_config(t)); }), r);
  }
  // create(Rendezvous) refuses it before starting a store server.
  Tuning bad;
  bad.cuda_ll_block_threads = 33;
  CommOptions o;
  o.config = small_config(bad);
  Rendezvous rv;
  rv.token = "tuning-test";
  expect_range_error(error_of([&] { Communicator::create(rv, o); }), kTuningRanges[2]);
  // Every field at the low edge of its range, then at the high edge: accepted.
  Tuning low, high;
  for (const TuningRange& r : kTuningRanges) {
    low.*r.member = r.accepted.front();
    high.*r.member = r.accepted.back();
  }
  EXPECT_NO_THROW(comms.create(small_config(low)));
  EXPECT_NO_THROW(comms.create(small_config(high)));
}

// --- Tuning files and the Tuning a communicator resolves (NOTE [tuning precedence]) ---------------------------

using testing::TempFiles;

// A tuning file with `entries` (JSON objects, comma-separated).
std::string tuning_json(const std::string& entries) {
  return R"({"format": "symcomm-tuning", "version": 1, "entries": [)" + entries + "]}";
}

std::string entry_json(int world_size, const std::string& device, const std::string& tuning) {
  return fmt::format(R"({{"world_size": {}, "device": "{}", "tuning": {{{}}},
    "provenance": {{"date": "2026-01-01T00:00:00Z", "command": "symcomm-tune"}},
    "measurements": [{{"collective": "all_reduce", "path": "ll", "bytes": 4096, "time_us": 2.5, "wrong": 0}}]}})",
                     world_size, device, tuning);
}

constexpr const char* kGpu = "NVIDIA H100 80GB HBM3";

// Every setting of a Config holding `t`: compares two Tunings field by field, naming the fields that differ.
std::vector<std::pair<std::string, std::string>> settings_of(const Tuning& t) {
  Config c;
  c.tuning = t;
  return c.settings();
}

TEST(TuningFile, AGoodFileGivesItsEntries) {
  const std::string text = tuning_json(entry_json(4, kGpu, R"("cuda_one_shot_max_bytes": 65536, "cuda_pdl": 0)") + "," +
                                       entry_json(2, "host", R"("host_one_shot_max_bytes": 1024)"));
  const detail::TuningFile f = detail::parse_tuning_file(text, "good.json");
  ASSERT_EQ(f.entries.size(), 2u);
  const detail::TuningEntry* gpu = f.find(4, kGpu);
  ASSERT_NE(gpu, nullptr);
  EXPECT_EQ(gpu->values,
            (std::vector<std::pair<std::string, size_t>>{{"cuda_one_shot_max_bytes", 65536}, {"cuda_pdl", 0}}));
  ASSERT_NE(f.find(2, "host"), nullptr);
  EXPECT_EQ(f.find(2, "host")->values[0].second, 1024u);
  EXPECT_EQ(f.find(2, kGpu), nullptr);    // another world size
  EXPECT_EQ(f.find(4, "host"), nullptr);  // another device
  // SIZE_MAX, the largest value, is written as a plain integer.
  EXPECT_EQ(detail::parse_tuning_file(
                tuning_json(entry_json(2, "host", R"("cuda_nccl_min_bytes": 18446744073709551615)")), "max.json")
                .entries[0]
                .values[0]
                .second,
            SIZE_MAX);
  // An empty file list and an entry without values are valid.
  EXPECT_TRUE(detail::parse_tuning_file(tuning_json(""), "empty.json").entries.empty());
  EXPECT_TRUE(detail::parse_tuning_file(tuning_json(entry_json(2, "host", "")), "none.json").entries[0].values.empty());
}

// An entry with one LL128 bound for the gathers gives reduce-scatter the same bound; one with both keeps both.
TEST(TuningFile, AnEntryWithOneLL128GatherBoundGivesReduceScatterTheSame) {
  const detail::TuningFile one =
      detail::parse_tuning_file(tuning_json(entry_json(4, kGpu, R"("cuda_ll128_gather_max_bytes": 65536)")), "1.json");
  const Tuning a = detail::resolve_tuning(Config{}, BackendKind::kCuda, 4, one.find(4, kGpu));
  EXPECT_EQ(a.cuda_ll128_gather_max_bytes, 65536u);
  EXPECT_EQ(a.cuda_ll128_reduce_scatter_max_bytes, 65536u);
  const detail::TuningFile both = detail::parse_tuning_file(
      tuning_json(entry_json(4, kGpu,
                             R"("cuda_ll128_gather_max_bytes": 65536, "cuda_ll128_reduce_scatter_max_bytes": 131072)")),
      "2.json");
  const Tuning b = detail::resolve_tuning(Config{}, BackendKind::kCuda, 4, both.find(4, kGpu));
  EXPECT_EQ(b.cuda_ll128_gather_max_bytes, 65536u);
  EXPECT_EQ(b.cuda_ll128_reduce_scatter_max_bytes, 131072u);
  // Neither: the per-world-size values, which differ.
  const Tuning c = detail::resolve_tuning(Config{}, BackendKind::kCuda, 4, nullptr);
  EXPECT_NE(c.cuda_ll128_gather_max_bytes, c.cuda_ll128_reduce_scatter_max_bytes);
}

// The refusal names the file and says what is wrong, with kInvalidArgument.
void expect_file_error(const std::string& text, const std::string& what) {
  SCOPED_TRACE(text);
  const Error e = error_of([&] { detail::parse_tuning_file(text, "bad.json"); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
  EXPECT_NE(e.message().find("tuning file 'bad.json'"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find(what), std::string::npos) << e.message();
}

TEST(TuningFile, AnUnknownFieldOrKeyIsRefusedNamingIt) {
  expect_file_error(tuning_json(entry_json(2, "host", R"("host_one_shot_max": 1024)")),
                    "unknown field 'host_one_shot_max'");
  expect_file_error(tuning_json(entry_json(2, "host", R"("heap_bytes": 1024)")), "unknown field 'heap_bytes'");
  expect_file_error(tuning_json(R"({"world_size": 2, "device": "host", "tuning": {}, "tunning": {}})"),
                    "unknown key 'tunning'");
  expect_file_error(R"({"format": "symcomm-tuning", "version": 1, "entries": [], "extra": 1})", "unknown key 'extra'");
}

TEST(TuningFile, AValueOutsideItsRangeIsRefusedNamingFileFieldVariableAndRange) {
  for (const TuningRange& r : kTuningRanges) {
    const std::string text = tuning_json(entry_json(4, kGpu, fmt::format(R"("{}": {})", r.field, r.refused.back())));
    SCOPED_TRACE(text);
    const Error e = error_of([&] { detail::parse_tuning_file(text, "range.json"); });
    expect_range_error(e, r);
    EXPECT_NE(e.message().find("tuning file 'range.json'"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find(fmt::format("4 ranks on '{}'", kGpu)), std::string::npos) << e.message();
    // Every entry is checked, not only the one a communicator would use.
    const std::string other = tuning_json(entry_json(2, "host", "") + "," +
                                          entry_json(8, kGpu, fmt::format(R"("{}": {})", r.field, r.refused.back())));
    expect_range_error(error_of([&] { detail::parse_tuning_file(other, "range.json"); }), r);
  }
}

TEST(TuningFile, MalformedJsonAndWrongShapesAreRefused) {
  expect_file_error(R"({"format": "symcomm-tuning", "version": 1, "entries": [)", "not valid JSON");
  expect_file_error("", "not valid JSON");
  expect_file_error("[]", "the top level is a array");
  expect_file_error(R"({"format": "other", "version": 1, "entries": []})", "\"format\" must be \"symcomm-tuning\"");
  expect_file_error(R"({"version": 1, "entries": []})", "\"format\" must be");
  expect_file_error(R"({"format": "symcomm-tuning", "version": 2, "entries": []})", "\"version\" must be 1");
  expect_file_error(R"({"format": "symcomm-tuning", "version": 1, "entries": {}})", "\"entries\" must be an array");
  expect_file_error(tuning_json("7"), "entries[0] is a number, not an object");
  expect_file_error(tuning_json(entry_json(0, "host", "")), "entries[0].world_size must be an integer in 1-64");
  expect_file_error(tuning_json(entry_json(65, "host", "")), "world_size must be an integer in 1-64");
  expect_file_error(tuning_json(R"({"world_size": "2", "device": "host", "tuning": {}})"), "world_size must be");
  expect_file_error(tuning_json(entry_json(2, "", "")), "entries[0].device must be a non-empty string");
  expect_file_error(tuning_json(R"({"world_size": 2, "device": "host", "tuning": []})"), ".tuning must be an object");
  expect_file_error(tuning_json(R"({"world_size": 2, "device": "host"})"), ".tuning must be an object");
  for (const char* bad : {"-1", "1.5", "\"64K\"", "true", "null"}) {
    expect_file_error(tuning_json(entry_json(2, "host", fmt::format(R"("host_one_shot_max_bytes": {})", bad))),
                      "host_one_shot_max_bytes must be a non-negative integer");
  }
  expect_file_error(tuning_json(entry_json(2, "host", "") + "," + entry_json(2, "host", "")),
                    "entries[1] is a second entry for 2 ranks on 'host'");
  expect_file_error(tuning_json(R"({"world_size": 2, "device": "host", "tuning": {}, "provenance": 1})"),
                    "provenance must be an object");
}

TEST(TuningFile, AFileThatCannotBeOpenedIsRefusedNamingIt) {
  TempFiles files;
  const std::string missing = files.dir() + "/missing.json";
  const Error e = error_of([&] { detail::read_tuning_file(missing); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(e.message().find("tuning file '" + missing + "': cannot be opened"), std::string::npos) << e.message();
  const std::string good = files.write("good.json", tuning_json(entry_json(2, "host", R"("cuda_pdl": 0)")));
  EXPECT_EQ(detail::read_tuning_file(good).entries.size(), 1u);
}

// NOTE [tuning precedence]: explicit settings > the file's entry > the compiled-in values for the world size >
// Tuning's defaults.
TEST(TuningPrecedence, ExplicitOverFileOverCompiledInOverDefaults) {
  const detail::TuningFile f = detail::parse_tuning_file(
      tuning_json(entry_json(4, kGpu,
                             R"("cuda_one_shot_max_bytes": 1048576, "cuda_ll_max_bytes": 131072,
                                "cuda_nccl_min_bytes": 1073741824)")),
      "p.json");
  // SYMCOMM_CUDA_ONE_SHOT_MAX_BYTES set to its 2-rank default: explicit, kept at 4 ranks.
  auto env = config_env({{"SYMCOMM_CUDA_ONE_SHOT_MAX_BYTES", "4M"}});
  const Config requested = Config::from_env();
  EXPECT_TRUE(requested.tuning_explicit.contains("cuda_one_shot_max_bytes"));
  const Tuning t = detail::resolve_tuning(requested, BackendKind::kCuda, 4, f.find(4, kGpu));
  const Tuning compiled = detail::measured_cuda_tuning(Tuning{}, 4);
  EXPECT_EQ(t.cuda_one_shot_max_bytes, size_t{4} << 20);  // explicit (the file says 1 MiB)
  EXPECT_EQ(t.cuda_ll_max_bytes, size_t{128} << 10);      // the file
  EXPECT_EQ(t.cuda_nccl_min_bytes, size_t{1} << 30);      // the file over the compiled-in value
  EXPECT_EQ(t.cuda_two_shot_push_min_bytes, compiled.cuda_two_shot_push_min_bytes);  // compiled-in for 4 ranks
  EXPECT_NE(t.cuda_two_shot_push_min_bytes, Tuning{}.cuda_two_shot_push_min_bytes);
  EXPECT_EQ(t.cuda_ll_chunks_per_thread, Tuning{}.cuda_ll_chunks_per_thread);  // default
  // Without the file's entry (another world size): the compiled-in values, the explicit one kept.
  const Tuning none = detail::resolve_tuning(requested, BackendKind::kCuda, 4, f.find(8, kGpu));
  Tuning want = compiled;
  want.cuda_one_shot_max_bytes = size_t{4} << 20;
  EXPECT_EQ(settings_of(none), settings_of(want));
}

TEST(TuningPrecedence, AnEntryMissingForTheWorldSizeLeavesTheCompiledInValues) {
  const detail::TuningFile f =
      detail::parse_tuning_file(tuning_json(entry_json(2, kGpu, R"("cuda_one_shot_max_bytes": 65536)")), "m.json");
  for (int n : {3, 4, 8}) {
    const Tuning t = detail::resolve_tuning(Config{}, BackendKind::kCuda, n, f.find(n, kGpu));
    EXPECT_EQ(settings_of(t), settings_of(detail::measured_cuda_tuning(Tuning{}, n))) << n;
  }
  EXPECT_EQ(detail::resolve_tuning(Config{}, BackendKind::kCuda, 2, f.find(2, kGpu)).cuda_one_shot_max_bytes, 65536u);
  // The host backend has no compiled-in values: its defaults.
  EXPECT_EQ(settings_of(detail::resolve_tuning(Config{}, BackendKind::kHost, 4, nullptr)), Config{}.settings());
}

// The compiled-in table's entry for the world size and device lies below a tuning file's entry and explicit
// settings, and above the per-world-size values (NOTE [tuning precedence]).
TEST(TuningPrecedence, TheCompiledInEntryIsBelowTheFileAndAboveThePerWorldSizeValues) {
  const detail::TuningFile compiled =
      detail::parse_tuning_file(tuning_json(entry_json(4, kGpu,
                                                       R"("cuda_ll_max_bytes": 8192, "cuda_ll128_max_bytes": 16384,
                                "cuda_one_shot_max_bytes": 32768)")),
                                "compiled.json");
  const detail::TuningFile file =
      detail::parse_tuning_file(tuning_json(entry_json(4, kGpu, R"("cuda_ll128_max_bytes": 65536)")), "f.json");
  auto env = config_env({{"SYMCOMM_CUDA_ONE_SHOT_MAX_BYTES", "4M"}});
  const Config requested = Config::from_env();
  const Tuning t = detail::resolve_tuning(requested, BackendKind::kCuda, 4, file.find(4, kGpu), compiled.find(4, kGpu));
  EXPECT_EQ(t.cuda_ll_max_bytes, 8192u);                  // the compiled-in entry
  EXPECT_EQ(t.cuda_ll128_max_bytes, 65536u);              // the file over the compiled-in entry
  EXPECT_EQ(t.cuda_one_shot_max_bytes, size_t{4} << 20);  // explicit over both
  EXPECT_EQ(t.cuda_nccl_min_bytes, detail::measured_cuda_tuning(Tuning{}, 4).cuda_nccl_min_bytes);  // per world size
  // Without a file: the compiled-in entry over the per-world-size values.
  const Tuning c = detail::resolve_tuning(Config{}, BackendKind::kCuda, 4, nullptr, compiled.find(4, kGpu));
  EXPECT_EQ(c.cuda_ll128_max_bytes, 16384u);
  EXPECT_EQ(c.cuda_one_shot_max_bytes, 32768u);
}

// The table built into the library (src/core/tuning_defaults.json) parses, every value in its field's range, and
// holds the machines it was measured on.
TEST(CompiledTuning, TheBuiltInTableParsesAndHoldsItsMachines) {
  const detail::TuningFile& t = detail::compiled_tuning();
  ASSERT_FALSE(t.entries.empty());
  for (const detail::TuningEntry& e : t.entries) {
    EXPECT_GE(e.world_size, 2) << e.device;
    EXPECT_FALSE(e.device.empty());
    EXPECT_FALSE(e.values.empty()) << e.device << " " << e.world_size;
    EXPECT_NO_THROW(detail::resolve_tuning(Config{}, BackendKind::kCuda, e.world_size, nullptr, &e));
  }
  for (int n : {2, 4}) EXPECT_NE(t.find(n, "NVIDIA H100 80GB HBM3"), nullptr) << n;
  EXPECT_EQ(t.find(4, "host"), nullptr);
}

TEST(TuningPrecedence, ACodeBuiltConfigSetsWhatItChangesAndWhatItNames) {
  const detail::TuningFile f = detail::parse_tuning_file(
      tuning_json(entry_json(4, kGpu, R"("cuda_ll_max_bytes": 4096, "cuda_ll128_max_bytes": 8192)")), "c.json");
  Config c;
  c.tuning.cuda_ll_max_bytes = 65536;                // differs from the default: set
  c.tuning_explicit.insert("cuda_ll128_max_bytes");  // the default, named: set
  const Tuning t = detail::resolve_tuning(c, BackendKind::kCuda, 4, f.find(4, kGpu));
  EXPECT_EQ(t.cuda_ll_max_bytes, 65536u);
  EXPECT_EQ(t.cuda_ll128_max_bytes, Tuning{}.cuda_ll128_max_bytes);
  c.tuning_explicit.insert("cuda_ll128_max");
  const Error e = error_of([&] { detail::resolve_tuning(c, BackendKind::kCuda, 4, nullptr); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(e.message().find("'cuda_ll128_max'"), std::string::npos) << e.message();
}

// A communicator reads SYMCOMM_TUNING_FILE at creation; a SYMCOMM_* tuning variable wins over it; a file that
// cannot be used fails the creation naming it.
TEST(TuningPrecedence, CommunicatorsReadTheFileAtCreation) {
  TempFiles files;
  const std::string path = files.write(
      "t.json", tuning_json(entry_json(1, "host", R"("host_one_shot_max_bytes": 1024, "cuda_ll_max_bytes": 2048)")));
  OneRankComm comms;
  {
    auto env = config_env({{"SYMCOMM_TUNING_FILE", path}, {"SYMCOMM_CUDA_LL_MAX_BYTES", "4096"}});
    Config c = Config::from_env();
    EXPECT_EQ(c.tuning_file, path);
    c.heap_bytes = size_t{1} << 20;
    auto comm = comms.create(c);
    EXPECT_EQ(comm->config().tuning.host_one_shot_max_bytes, 1024u);  // the file
    EXPECT_EQ(comm->config().tuning.cuda_ll_max_bytes, 4096u);        // the variable
    EXPECT_EQ(comm->config().tuning_file, path);
  }
  Config c = small_config(Tuning{});
  c.tuning_file = files.write("bad.json", "{\"format\": ");
  Error e = error_of([&] { comms.create(c); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
  EXPECT_NE(e.message().find("tuning file '" + c.tuning_file + "': not valid JSON"), std::string::npos) << e.message();
  c.tuning_file = files.dir() + "/none.json";
  e = error_of([&] { comms.create(c); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
  EXPECT_NE(e.message().find("cannot be opened"), std::string::npos) << e.message();
  // The next creation, without the file, works.
  c.tuning_file.clear();
  EXPECT_NO_THROW(comms.create(c));
}

// --- Rendezvous::from_env ----------------------------------------------------------------------------------

const std::vector<std::string> kLauncherVars = {
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "SYMCOMM_TOKEN",
    "TORCHELASTIC_RUN_ID",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
};

// Every launcher variable unset, except those given.
ScopedEnvSet launcher_env(const std::vector<std::pair<std::string, std::string>>& set) {
  std::vector<std::pair<std::string, std::optional<std::string>>> vars;
  for (const std::string& name : kLauncherVars) {
    std::optional<std::string> value;
    for (const auto& [n, v] : set) {
      if (n == name) value = v;
    }
    vars.emplace_back(name, value);
  }
  return ScopedEnvSet(vars);
}

// Silences the warning about a derived token for the test's duration, then restores the level.
class QuietLog {
 public:
  QuietLog() : previous_(detail::log_level()) { detail::set_log_level(LogLevel::kOff); }
  ~QuietLog() { detail::set_log_level(previous_); }

 private:
  LogLevel previous_;
};

const std::vector<std::pair<std::string, std::string>> kTorchrun = {
    {"RANK", "3"},
    {"WORLD_SIZE", "8"},
    {"LOCAL_RANK", "1"},
    {"LOCAL_WORLD_SIZE", "4"},
    {"MASTER_ADDR", "10.1.2.3"},
    {"MASTER_PORT", "29500"},
    {"SYMCOMM_TOKEN", "s3cret"},
};

const std::vector<std::pair<std::string, std::string>> kOpenMpi = {
    {"OMPI_COMM_WORLD_RANK", "2"},       {"OMPI_COMM_WORLD_SIZE", "6"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
    {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}, {"MASTER_ADDR", "node7"},      {"MASTER_PORT", "1234"},
    {"SYMCOMM_TOKEN", "mpi-token"},
};

// `base` with `name` replaced (value) or removed (nullopt).
std::vector<std::pair<std::string, std::string>> with(std::vector<std::pair<std::string, std::string>> base,
                                                      const std::string& name, std::optional<std::string> value) {
  std::erase_if(base, [&](const auto& kv) { return kv.first == name; });
  if (value) base.emplace_back(name, *value);
  return base;
}

void expect_rendezvous_rejected(const std::vector<std::pair<std::string, std::string>>& vars,
                                const std::string& named) {
  auto env = launcher_env(vars);
  Error e = error_of([] { Rendezvous::from_env(); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
  EXPECT_NE(e.message().find(named), std::string::npos) << e.message();
}

TEST(RendezvousFromEnv, Torchrun) {
  auto env = launcher_env(kTorchrun);
  Rendezvous rv = Rendezvous::from_env();
  EXPECT_EQ(rv.ranks.rank, 3);
  EXPECT_EQ(rv.ranks.world_size, 8);
  EXPECT_EQ(rv.ranks.local_rank, 1);
  EXPECT_EQ(rv.ranks.local_world_size, 4);
  EXPECT_EQ(rv.store_host, "10.1.2.3");
  EXPECT_EQ(rv.store_port, 29500);
  EXPECT_EQ(rv.token, "s3cret");
}

TEST(RendezvousFromEnv, TorchrunLocalVariablesDefaultToGlobalOnes) {
  auto env = launcher_env(with(with(kTorchrun, "LOCAL_RANK", std::nullopt), "LOCAL_WORLD_SIZE", std::nullopt));
  Rendezvous rv = Rendezvous::from_env();
  EXPECT_EQ(rv.ranks.local_rank, 3);
  EXPECT_EQ(rv.ranks.local_world_size, 8);
}

TEST(RendezvousFromEnv, LocalhostBecomesLoopbackAddress) {
  auto env = launcher_env(with(kTorchrun, "MASTER_ADDR", "localhost"));
  EXPECT_EQ(Rendezvous::from_env().store_host, "127.0.0.1");
}

TEST(RendezvousFromEnv, OpenMpi) {
  auto env = launcher_env(kOpenMpi);
  Rendezvous rv = Rendezvous::from_env();
  EXPECT_EQ(rv.ranks.rank, 2);
  EXPECT_EQ(rv.ranks.world_size, 6);
  EXPECT_EQ(rv.ranks.local_rank, 0);
  EXPECT_EQ(rv.ranks.local_world_size, 3);
  EXPECT_EQ(rv.store_host, "node7");
  EXPECT_EQ(rv.store_port, 1234);
  EXPECT_EQ(rv.token, "mpi-token");
}

TEST(RendezvousFromEnv, OpenMpiLocalVariablesDefaultToGlobalOnes) {
  auto env = launcher_env(
      with(with(kOpenMpi, "OMPI_COMM_WORLD_LOCAL_RANK", std::nullopt), "OMPI_COMM_WORLD_LOCAL_SIZE", std::nullopt));
  Rendezvous rv = Rendezvous::from_env();
  EXPECT_EQ(rv.ranks.local_rank, 2);
  EXPECT_EQ(rv.ranks.local_world_size, 6);
}

TEST(RendezvousFromEnv, TorchrunVariablesWinOverOpenMpi) {
  auto vars = kTorchrun;
  vars.insert(vars.end(), {{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "7"}});
  auto env = launcher_env(vars);
  Rendezvous rv = Rendezvous::from_env();
  EXPECT_EQ(rv.ranks.rank, 3);
  EXPECT_EQ(rv.ranks.world_size, 8);
}

// Only RANK selects torchrun: other torchrun variables left over in an mpirun job do not.
TEST(RendezvousFromEnv, OpenMpiIsUsedWhenRankIsUnset) {
  auto vars = kOpenMpi;
  vars.insert(vars.end(), {{"WORLD_SIZE", "99"}, {"LOCAL_RANK", "9"}});
  auto env = launcher_env(vars);
  Rendezvous rv = Rendezvous::from_env();
  EXPECT_EQ(rv.ranks.rank, 2);
  EXPECT_EQ(rv.ranks.world_size, 6);
  EXPECT_EQ(rv.ranks.local_rank, 0);
}

TEST(RendezvousFromEnv, MissingVariablesAreNamed) {
  expect_rendezvous_rejected({}, "RANK");  // no launcher at all
  expect_rendezvous_rejected(with(kTorchrun, "WORLD_SIZE", std::nullopt), "WORLD_SIZE");
  expect_rendezvous_rejected(with(kTorchrun, "MASTER_ADDR", std::nullopt), "MASTER_ADDR");
  expect_rendezvous_rejected(with(kTorchrun, "MASTER_PORT", std::nullopt), "MASTER_PORT");
  expect_rendezvous_rejected(with(kTorchrun, "WORLD_SIZE", ""), "WORLD_SIZE");  // empty counts as unset
  expect_rendezvous_rejected(with(kOpenMpi, "OMPI_COMM_WORLD_SIZE", std::nullopt), "OMPI_COMM_WORLD_SIZE");
  // Under mpirun without MASTER_ADDR/MASTER_PORT the message points to the MPI bootstrap.
  expect_rendezvous_rejected(with(kOpenMpi, "MASTER_ADDR", std::nullopt), "MASTER_ADDR");
  expect_rendezvous_rejected(with(kOpenMpi, "MASTER_PORT", std::nullopt), "create_communicator_mpi");
}

TEST(RendezvousFromEnv, MalformedVariablesAreNamed) {
  expect_rendezvous_rejected(with(kTorchrun, "RANK", "abc"), "RANK");
  expect_rendezvous_rejected(with(kTorchrun, "RANK", "-1"), "RANK");
  expect_rendezvous_rejected(with(kTorchrun, "WORLD_SIZE", "8x"), "WORLD_SIZE");
  expect_rendezvous_rejected(with(kTorchrun, "WORLD_SIZE", "99999999999999999999"), "WORLD_SIZE");
  expect_rendezvous_rejected(with(kTorchrun, "LOCAL_RANK", "one"), "LOCAL_RANK");
  expect_rendezvous_rejected(with(kTorchrun, "LOCAL_WORLD_SIZE", "4.0"), "LOCAL_WORLD_SIZE");
  // Digits only, as for Config's variables (strtol alone takes a sign and leading blanks).
  expect_rendezvous_rejected(with(kTorchrun, "RANK", "+3"), "RANK");
  expect_rendezvous_rejected(with(kTorchrun, "RANK", " 3"), "RANK");
  expect_rendezvous_rejected(with(kTorchrun, "MASTER_PORT", "+29500"), "MASTER_PORT");
  expect_rendezvous_rejected(with(kTorchrun, "MASTER_PORT", "http"), "MASTER_PORT");
  expect_rendezvous_rejected(with(kTorchrun, "MASTER_PORT", "0"), "MASTER_PORT");
  expect_rendezvous_rejected(with(kTorchrun, "MASTER_PORT", "65536"), "MASTER_PORT");
  expect_rendezvous_rejected(with(kOpenMpi, "OMPI_COMM_WORLD_RANK", "x"), "OMPI_COMM_WORLD_RANK");
}

bool is_derived_token(const std::string& t) {
  return t.size() == 8 + 16 && t.starts_with("derived-") &&
         t.find_first_not_of("0123456789abcdef", 8) == std::string::npos;
}

// Without SYMCOMM_TOKEN every rank derives the token from what all ranks share (run id, address, port), so
// it must not depend on the rank variables.
TEST(RendezvousFromEnv, TokenIsDerivedWhenSymcommTokenIsUnset) {
  QuietLog quiet;
  const auto no_token = with(kTorchrun, "SYMCOMM_TOKEN", std::nullopt);
  auto token_with = [&](const std::vector<std::pair<std::string, std::string>>& vars) {
    auto env = launcher_env(vars);
    return Rendezvous::from_env().token;
  };
  const std::string derived = token_with(no_token);
  EXPECT_TRUE(is_derived_token(derived)) << derived;
  EXPECT_EQ(token_with(no_token), derived);  // deterministic
  // Every rank of the job gets the same token.
  EXPECT_EQ(token_with(with(with(no_token, "RANK", "0"), "LOCAL_RANK", "0")), derived);
  EXPECT_EQ(token_with(with(with(no_token, "RANK", "7"), "LOCAL_RANK", "3")), derived);
  // An empty SYMCOMM_TOKEN counts as unset.
  EXPECT_EQ(token_with(with(no_token, "SYMCOMM_TOKEN", "")), derived);
  // Each shared input changes it.
  const std::string run_a = token_with(with(no_token, "TORCHELASTIC_RUN_ID", "job42"));
  const std::string run_b = token_with(with(no_token, "TORCHELASTIC_RUN_ID", "job43"));
  const std::string other_port = token_with(with(no_token, "MASTER_PORT", "29501"));
  const std::string other_addr = token_with(with(no_token, "MASTER_ADDR", "10.1.2.4"));
  for (const std::string& t : {run_a, run_b, other_port, other_addr}) {
    EXPECT_TRUE(is_derived_token(t)) << t;
    EXPECT_NE(t, derived);
  }
  EXPECT_NE(run_a, run_b);
  EXPECT_NE(other_port, other_addr);
}

TEST(RendezvousFromEnv, SymcommTokenIsUsedWhenSet) {
  auto env = launcher_env(with(kTorchrun, "SYMCOMM_TOKEN", "given-token"));
  EXPECT_EQ(Rendezvous::from_env().token, "given-token");
  auto env2 = launcher_env(with(kOpenMpi, "SYMCOMM_TOKEN", "mpi-given"));
  EXPECT_EQ(Rendezvous::from_env().token, "mpi-given");
}

}  // namespace
}  // namespace symcomm
