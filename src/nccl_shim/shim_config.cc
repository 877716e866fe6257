#include "shim_config.h"

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

}  // namespace

ShimConfig read_config() noexcept {  // NOTE [drop-in environment]
  ShimConfig c;
  c.mode_text = env_or_empty("SYMCOMM_NCCL_SHIM");
  c.mode = parse_mode(c.mode_text);
  c.real_library = env_or_empty("SYMCOMM_NCCL_REAL_LIBRARY");
  c.library_path = env_or_empty("LD_LIBRARY_PATH");
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
