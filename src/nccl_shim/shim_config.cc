#include "shim_config.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace symcomm::nccl_shim {
namespace {

const char* env_or_empty(const char* name) noexcept {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

Mode parse_mode(const char* v) noexcept {
  if (*v == '\0' || std::strcmp(v, "forward") == 0) return Mode::kForward;
  if (std::strcmp(v, "auto") == 0) return Mode::kAuto;
  if (std::strcmp(v, "native-only") == 0) return Mode::kNativeOnly;
  return Mode::kUnknown;
}

// A byte count: decimal digits, or "max". false for anything else.
bool parse_bytes(const char* v, size_t* out) noexcept {
  if (std::strcmp(v, "max") == 0) {
    *out = SIZE_MAX;
    return true;
  }
  if (*v < '0' || *v > '9') return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (errno != 0 || *end != '\0' || n >= kUnsetLimit) return false;
  *out = static_cast<size_t>(n);
  return true;
}

constexpr const char* kLimitVariables[4] = {
    "SYMCOMM_NCCL_SHIM_ALL_REDUCE_MAX_BYTES", "SYMCOMM_NCCL_SHIM_ALL_GATHER_MAX_BYTES",
    "SYMCOMM_NCCL_SHIM_REDUCE_SCATTER_MAX_BYTES", "SYMCOMM_NCCL_SHIM_BROADCAST_MAX_BYTES"};

// Records the first variable whose value could not be read.
void refuse(ShimConfig& c, const char* variable, const char* expected) noexcept {
  if (c.bad_variable != nullptr) return;
  c.bad_variable = variable;
  c.bad_expected = expected;
}

}  // namespace

ShimConfig read_config() noexcept {  // NOTE [drop-in environment]
  ShimConfig c;
  c.mode_text = env_or_empty("SYMCOMM_NCCL_SHIM");
  c.mode = parse_mode(c.mode_text);
  c.real_library = env_or_empty("SYMCOMM_NCCL_REAL_LIBRARY");
  c.library_path = env_or_empty("LD_LIBRARY_PATH");
  c.stats = std::strcmp(env_or_empty("SYMCOMM_NCCL_SHIM_STATS"), "1") == 0;
  for (int i = 0; i < 4; ++i) {
    const char* v = env_or_empty(kLimitVariables[i]);
    if (*v != '\0' && !parse_bytes(v, &c.max_bytes[i])) refuse(c, kLimitVariables[i], "a number of bytes or \"max\"");
  }
  c.heap_bytes_set = *env_or_empty("SYMCOMM_HEAP_BYTES") != '\0';
  c.timeout_set = *env_or_empty("SYMCOMM_TIMEOUT_MS") != '\0';
  const char* t = env_or_empty("SYMCOMM_NCCL_SHIM_INIT_TIMEOUT_MS");
  size_t ms = 0;
  if (*t != '\0') {
    if (parse_bytes(t, &ms) && ms > 0 && ms <= 3600000) {
      c.init_timeout_ms = static_cast<long>(ms);
    } else {
      refuse(c, "SYMCOMM_NCCL_SHIM_INIT_TIMEOUT_MS", "a number of milliseconds from 1 to 3600000");
    }
  }
  const char* fake = env_or_empty("SYMCOMM_FAKE_NODE_SIZE");
  size_t size = 0;
  if (*fake != '\0') {
    if (parse_bytes(fake, &size) && size <= 1u << 20) {
      c.fake_node_size = static_cast<int>(size);
    } else {
      refuse(c, "SYMCOMM_FAKE_NODE_SIZE", "a whole number of ranks");
    }
  }
  c.node_min_bytes = env_or_empty("SYMCOMM_NODE_MIN_BYTES");
  return c;
}

const char* mode_name(Mode mode) noexcept {
  switch (mode) {
    case Mode::kForward: return "forward";
    case Mode::kAuto: return "auto";
    case Mode::kNativeOnly: return "native-only";
    case Mode::kUnknown: return "unknown";
  }
  return "unknown";
}

}  // namespace symcomm::nccl_shim
