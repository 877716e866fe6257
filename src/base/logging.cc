#include "base/logging.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>

namespace symcomm::detail {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kWarn)};
std::atomic<int> g_rank{-1};
std::atomic<bool> g_level_from_env_read{false};

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kError: return "ERROR";
    case LogLevel::kWarn: return "WARN";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kOff: return "OFF";
  }
  return "?";
}
}  // namespace

LogLevel log_level() {
  if (!g_level_from_env_read.load(std::memory_order_acquire)) {
    // The first log call honours SYMCOMM_LOG even before any communicator exists.
    g_level_from_env_read.store(true, std::memory_order_release);
    try {
      set_log_level(Config::from_env().log_level);
    } catch (...) {
      // A malformed SYMCOMM_LOG is reported when a communicator reads the configuration.
    }
  }
  return static_cast<LogLevel>(g_level.load(std::memory_order_relaxed));
}

void set_log_level(LogLevel level) {
  g_level_from_env_read.store(true, std::memory_order_release);
  g_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

void set_log_rank(int rank) { g_rank.store(rank, std::memory_order_relaxed); }
int log_rank() { return g_rank.load(std::memory_order_relaxed); }

void log_write(LogLevel level, std::string_view message) {
  std::string line = fmt::format("[symcomm {} pid {} rank {}] {}\n", level_name(level), getpid(),
                                 g_rank.load(std::memory_order_relaxed), message);
  // One write() per line so that lines of concurrent ranks do not interleave.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace symcomm::detail
