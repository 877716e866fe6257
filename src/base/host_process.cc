// Processes of this host (src/base/host_process.h).

#include "base/host_process.h"

#include <fmt/format.h>
#include <unistd.h>

#include <fstream>

namespace symcomm::detail {

std::string host_identity() {
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  char ns[256] = {};
  const ssize_t n = ::readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
  return boot + "/" + (n > 0 ? std::string(ns, n) : std::string("?"));
}

bool process_gone(int pid) {
  std::ifstream f(fmt::format("/proc/{}/stat", pid));
  if (!f) return true;
  std::string line;
  std::getline(f, line);
  // The state follows the command name, which is in parentheses and may itself hold ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  const char state = line[close + 2];
  return state == 'Z' || state == 'X';
}

}  // namespace symcomm::detail
