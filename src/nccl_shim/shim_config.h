// The settings of libsymcomm_nccl, the NCCL drop-in library (docs/nccl-drop-in.md).
#pragma once

#include <cstddef>

namespace symcomm::nccl_shim {

// What the drop-in library does with a call (SYMCOMM_NCCL_SHIM). A build without symcomm's CUDA backend has
// kForward only and refuses the other two with a message instead of ignoring them.
enum class Mode {
  kForward,     ///< "forward" (the default): every call to the real NCCL with the caller's arguments
  kAuto,        ///< "auto": symcomm's own collectives where its size limits say they are faster, else NCCL
  kNativeOnly,  ///< "native-only": every collective symcomm can run, whatever its size; a communicator that
                ///< symcomm does not serve fails them (ncclInvalidUsage); calls without an exact symcomm
                ///< equivalent (FP8, unsigned min/max, PreMulSum ops) still go to NCCL
  kUnknown,     ///< any other value
};

// NOTE [drop-in environment]
// libsymcomm_nccl's own settings: this file is the only one of src/nccl_shim that reads the environment
// (tools/lint.sh allows it). The variables are read once, on the first call that reaches the library (the
// forwarding part for the search for the real library, the native layer for its mode and limits); nothing
// here allocates or throws.
//   SYMCOMM_NCCL_SHIM           forward | auto | native-only (empty or unset: forward)
//   SYMCOMM_NCCL_REAL_LIBRARY   path of the real libnccl.so.2 (empty or unset: search, real_nccl.cc)
//   LD_LIBRARY_PATH             the first directories of that search, as the dynamic loader would take them
//   SYMCOMM_NCCL_SHIM_STATS     1: print the native and forwarded calls and bytes on stderr at exit
//   SYMCOMM_NCCL_SHIM_<COLL>_MAX_BYTES  auto mode's size limit of ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER,
//                               BROADCAST (bytes, or "max"; unset: native_plan.cc's table); must be equal on
//                               every rank (communicators whose ranks differ stay forward-only)
//   SYMCOMM_NCCL_SHIM_INIT_TIMEOUT_MS  bound of symcomm's part of a communicator's creation (default 30000)
//   SYMCOMM_FAKE_NODE_SIZE      communicators of one host taken as nodes of this many ranks (a whole number;
//                               unset or 0: nodes are hosts), as symcomm.torch takes it
//   SYMCOMM_NODE_MIN_BYTES      communicators that span nodes: where the hierarchical path starts, per collective
//                               ("all_reduce=64K,..."; unset: the CUDA defaults, flat at every size), as
//                               symcomm.torch takes it
// The last two, like the size limits, must be equal on every rank.
// libsymcomm's own SYMCOMM_* settings (Config::from_env) apply to the communicators it makes behind NCCL's.
// SYMCOMM_NCCL (the CUDA backend's eager|lazy|off) is libsymcomm's, a different setting.
inline constexpr size_t kUnsetLimit = ~size_t{0} - 1;  ///< a size limit not set in the environment

struct ShimConfig {
  Mode mode = Mode::kForward;
  bool stats = false;
  size_t max_bytes[4] = {kUnsetLimit, kUnsetLimit, kUnsetLimit, kUnsetLimit};  ///< by NativeColl
  const char* bad_variable = nullptr;  ///< the first variable above whose value could not be read
  const char* bad_expected = "";       ///< what that variable takes, for the refusal's text
  long init_timeout_ms = 30000;
  int fake_node_size = 0;           ///< SYMCOMM_FAKE_NODE_SIZE (0 when unset)
  const char* node_min_bytes = "";  ///< SYMCOMM_NODE_MIN_BYTES ("" when unset; read where it is used)
  bool heap_bytes_set = false;      ///< SYMCOMM_HEAP_BYTES (libsymcomm's) is set
  bool timeout_set = false;         ///< SYMCOMM_TIMEOUT_MS (libsymcomm's) is set
  const char* mode_text = "";       ///< SYMCOMM_NCCL_SHIM as set ("" when unset)
  const char* real_library = "";    ///< SYMCOMM_NCCL_REAL_LIBRARY ("" when unset)
  const char* library_path = "";    ///< LD_LIBRARY_PATH ("" when unset)
};

// The settings of the environment now; the strings point into the environment and stay valid until it is
// changed.
ShimConfig read_config() noexcept;

const char* mode_name(Mode mode) noexcept;

}  // namespace symcomm::nccl_shim
