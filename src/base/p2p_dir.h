#pragma once
// The direction of a point-to-point operation (Communicator::send / recv), carried by requests
// (src/algos/request.h) and by the op history's records (op_history.h). kNone marks a collective.

#include <cstdint>

namespace symcomm::detail {

enum class P2pDir : uint8_t { kNone, kSend, kRecv };

/// "send", "recv"; "collective" for kNone.
inline const char* p2p_dir_name(P2pDir d) {
  return d == P2pDir::kSend ? "send" : d == P2pDir::kRecv ? "recv" : "collective";
}

}  // namespace symcomm::detail
