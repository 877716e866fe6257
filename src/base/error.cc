#include "symcomm/error.h"

#include <fmt/format.h>

#include "base/check.h"

namespace symcomm {

std::string_view to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kTimeout: return "timeout";
    case ErrorCode::kPeerDead: return "peer dead";
    case ErrorCode::kAborted: return "aborted";
    case ErrorCode::kMismatch: return "mismatch";
    case ErrorCode::kStore: return "store";
    case ErrorCode::kSystem: return "system";
    case ErrorCode::kCuda: return "cuda";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kInternal: return "internal";
  }
  return "unknown";
}

namespace {
const char* basename_of(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}
}  // namespace

Error::Error(ErrorCode code, std::string message, const char* file, int line, std::vector<int> ranks)
    : std::runtime_error(
          fmt::format("symcomm {} error: {} ({}:{})", to_string(code), message, basename_of(file), line)),
      code_(code),
      message_(std::move(message)),
      file_(file),
      line_(line),
      ranks_(std::move(ranks)) {}

namespace detail {
void throw_error(ErrorCode code, std::string message, const char* file, int line, std::vector<int> ranks) {
  throw Error(code, std::move(message), file, line, std::move(ranks));
}
}  // namespace detail

}  // namespace symcomm
