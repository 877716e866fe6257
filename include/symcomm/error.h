#pragma once
/// \file error.h
/// symcomm reports every failure with one exception type, symcomm::Error, carrying a code, a message,
/// the source location that raised it and, where it applies, the ranks involved (dead, late, mismatched).

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace symcomm {

enum class ErrorCode : int {
  kInvalidArgument = 1,  ///< bad pointer, count, enum, option or environment value; nothing was launched
  kTimeout = 2,          ///< a wait passed its deadline; ranks() names the peers that did not arrive
  kPeerDead = 3,         ///< a peer process died or left; ranks() names it
  kAborted = 4,          ///< abort() was called on this communicator
  kMismatch = 5,         ///< ranks issued different collectives/counts/dtypes/ops/roots
  kStore = 6,            ///< rendezvous store failure (connection, protocol, token, limits)
  kSystem = 7,           ///< an operating-system call failed
  kCuda = 8,             ///< a CUDA runtime/driver or NCCL call failed
  kUnsupported = 9,      ///< the request is valid but this build/backend/topology cannot run it
  kInternal = 10,        ///< a bug in symcomm
};

std::string_view to_string(ErrorCode code);

/// The one exception type thrown by symcomm.
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, std::string message, const char* file = "", int line = 0, std::vector<int> ranks = {});

  ErrorCode code() const noexcept { return code_; }
  /// The message without the "[code] file:line" decoration.
  const std::string& message() const noexcept { return message_; }
  const char* file() const noexcept { return file_; }
  int line() const noexcept { return line_; }
  /// Ranks the error is about (dead peers, ranks that did not arrive, mismatched ranks); may be empty.
  const std::vector<int>& ranks() const noexcept { return ranks_; }

 private:
  ErrorCode code_;
  std::string message_;
  const char* file_;
  int line_;
  std::vector<int> ranks_;
};

}  // namespace symcomm
