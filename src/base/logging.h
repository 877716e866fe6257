#pragma once
// Leveled logging to stderr. The level comes from Config::log_level (SYMCOMM_LOG): SYMCOMM_LOG at start-up,
// then each communicator's creation sets the process-wide level to its own, so the last one created decides.

#include <fmt/format.h>

#include <string_view>

#include "symcomm/config.h"

namespace symcomm::detail {

LogLevel log_level();
void set_log_level(LogLevel level);
/// Rank shown in log lines of this process (-1: unknown).
void set_log_rank(int rank);
/// The rank set by set_log_rank (-1 before).
int log_rank();
void log_write(LogLevel level, std::string_view message);

template <class... Args>
void log(LogLevel level, fmt::format_string<Args...> f, Args&&... args) {
  if (level <= log_level() && level != LogLevel::kOff) {
    log_write(level, fmt::format(f, std::forward<Args>(args)...));
  }
}

}  // namespace symcomm::detail

#define SYMCOMM_LOG_ERROR(...) ::symcomm::detail::log(::symcomm::LogLevel::kError, __VA_ARGS__)
#define SYMCOMM_LOG_WARN(...) ::symcomm::detail::log(::symcomm::LogLevel::kWarn, __VA_ARGS__)
#define SYMCOMM_LOG_INFO(...) ::symcomm::detail::log(::symcomm::LogLevel::kInfo, __VA_ARGS__)
#define SYMCOMM_LOG_DEBUG(...) ::symcomm::detail::log(::symcomm::LogLevel::kDebug, __VA_ARGS__)
