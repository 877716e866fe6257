// The settings of libsymcomm_nccl, the NCCL drop-in library (docs/nccl-drop-in.md).
#pragma once

namespace symcomm::nccl_shim {

// What the drop-in library does with a call (SYMCOMM_NCCL_SHIM). This build implements kForward only: every
// call goes to the real NCCL with the caller's arguments unchanged. The other modes are recognised so that a
// setting meant for a build that has them is refused with a message instead of being ignored.
enum class Mode {
  kForward,     ///< "forward" (the default)
  kAuto,        ///< "auto": symcomm's own collectives where they apply, else the real NCCL (not in this build)
  kNativeOnly,  ///< "native-only": symcomm's own collectives only (not in this build)
  kUnknown,     ///< any other value
};

// NOTE [drop-in environment]
// libsymcomm_nccl is a front end of its own: it links nothing of libsymcomm and does not use its Config table,
// and this file is the only one of src/nccl_shim that reads the environment (tools/lint.sh allows it). The
// variables are read once, on the first call that reaches the library, and the values are used during that
// call only (the search for the real library); nothing here allocates or throws.
//   SYMCOMM_NCCL_SHIM           forward | auto | native-only (empty or unset: forward)
//   SYMCOMM_NCCL_REAL_LIBRARY   path of the real libnccl.so.2 (empty or unset: search, real_nccl.cc)
//   LD_LIBRARY_PATH             the first directories of that search, as the dynamic loader would take them
// SYMCOMM_NCCL (the CUDA backend's eager|lazy|off) is libsymcomm's, a different setting.
struct ShimConfig {
  Mode mode = Mode::kForward;
  const char* mode_text = "";     ///< SYMCOMM_NCCL_SHIM as set ("" when unset)
  const char* real_library = "";  ///< SYMCOMM_NCCL_REAL_LIBRARY ("" when unset)
  const char* library_path = "";  ///< LD_LIBRARY_PATH ("" when unset)
};

// The settings of the environment now; the strings point into the environment and stay valid until it is
// changed.
ShimConfig read_config() noexcept;

const char* mode_name(Mode mode) noexcept;

}  // namespace symcomm::nccl_shim
