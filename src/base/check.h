#pragma once
// Check macros: the only way library code raises errors (converted to symcomm::Error once, here).

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "symcomm/error.h"

namespace symcomm::detail {

[[noreturn]] void throw_error(ErrorCode code, std::string message, const char* file, int line,
                              std::vector<int> ranks = {});

/// Errors that leave a communicator unusable (recorded as its sticky error): every error but a bad argument and an
/// unsupported call.
inline bool is_fatal(ErrorCode code) { return code != ErrorCode::kInvalidArgument && code != ErrorCode::kUnsupported; }

}  // namespace symcomm::detail

/// Throws Error(code, fmt::format(...)) with this file and line.
#define SYMCOMM_THROW(code, ...) \
  ::symcomm::detail::throw_error(::symcomm::ErrorCode::code, ::fmt::format(__VA_ARGS__), __FILE__, __LINE__)

/// Throws Error(code, message) if cond is false.
#define SYMCOMM_CHECK(cond, code, ...)  \
  do {                                  \
    if (!(cond)) {                      \
      SYMCOMM_THROW(code, __VA_ARGS__); \
    }                                   \
  } while (0)

/// Throws Error(kInvalidArgument, ...) if cond is false.
#define SYMCOMM_CHECK_ARG(cond, ...) SYMCOMM_CHECK(cond, kInvalidArgument, __VA_ARGS__)

/// For system calls returning -1 and setting errno: throws Error(kSystem) with strerror.
#define SYMCOMM_CHECK_SYS(expr, what)                                                                          \
  do {                                                                                                         \
    if ((expr) == -1) {                                                                                        \
      int symcomm_errno_ = errno;                                                                              \
      SYMCOMM_THROW(kSystem, "{} failed: {} (errno {})", what, std::strerror(symcomm_errno_), symcomm_errno_); \
    }                                                                                                          \
  } while (0)
