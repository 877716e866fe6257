#pragma once
// Tuning files (docs/tuning.md): measured values of Tuning fields per world size and GPU, written by
// symcomm-tune (bench/tune) and read by every communicator at creation (Config::tuning_file), and the one
// function that puts a communicator's Tuning together (NOTE [tuning precedence] in tuning_file.cc).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "symcomm/config.h"
#include "symcomm/types.h"

namespace symcomm::detail {

/// One Tuning field as the config table (src/core/config.cc) declares it.
struct TuningField {
  std::string_view name;  ///< "cuda_one_shot_max_bytes": the name tuning files and Config::tuning_explicit use
  std::string_view env;   ///< "SYMCOMM_CUDA_ONE_SHOT_MAX_BYTES"
  size_t Tuning::*member = nullptr;
  uint64_t max = UINT64_MAX;  ///< the largest value of the field's range
};
/// Every Tuning field, in the config table's order.
const std::vector<TuningField>& tuning_fields();
/// The field named `name`, or nullptr.
const TuningField* find_tuning_field(std::string_view name);

/// What a tuning file's "format" and "version" must say.
inline constexpr std::string_view kTuningFileFormat = "symcomm-tuning";
inline constexpr int kTuningFileVersion = 1;
/// The device of the host backend's entries (CUDA entries name the GPU as cudaDeviceProp::name does).
inline constexpr std::string_view kHostTuningDevice = "host";

/// One entry of a tuning file: the values measured for `world_size` ranks on `device`.
struct TuningEntry {
  int world_size = 0;
  std::string device;
  std::vector<std::pair<std::string, size_t>> values;  ///< (field name, value), each known and in its range
};

struct TuningFile {
  std::string path;
  std::vector<TuningEntry> entries;  ///< at most one per (world_size, device)
  /// The entry for `world_size` ranks on `device`, or nullptr.
  const TuningEntry* find(int world_size, std::string_view device) const;
};

/// Parses the text of a tuning file (format in docs/tuning.md). Throws Error(kInvalidArgument) "tuning file
/// '<path>': <problem>" for text that is not JSON, a missing or mistyped key, an unknown key or Tuning field, a
/// value outside its field's range (the ranges of Tuning::validate()), or two entries for one world size and
/// device.
TuningFile parse_tuning_file(std::string_view text, const std::string& path);
/// Reads and parses the file at `path`; one that cannot be read is Error(kInvalidArgument) naming it and why.
TuningFile read_tuning_file(const std::string& path);
/// The text of a configuration file (a tuning or topology file); throws Error(kInvalidArgument) "<what> '<path>':
/// cannot be opened: <reason>" or "... cannot be read".
std::string read_config_file(const std::string& path, std::string_view what);

/// The tuning table compiled into the library: src/core/tuning_defaults.json, written by symcomm-tune on the
/// machines it names, parsed once (NOTE [tuning precedence]).
const TuningFile& compiled_tuning();

/// The Tuning of a communicator of `world_size` ranks on `backend` (NOTE [tuning precedence]): the fields of
/// `requested.tuning` set explicitly (Config::tuning_explicit, or different from Tuning's default), over the
/// values of `entry` (the tuning file's; may be null), over those of `compiled` (compiled_tuning()'s entry for
/// the world size and device; may be null), over the compiled-in values for the world size (CUDA:
/// measured_cuda_tuning), over Tuning's defaults. Throws Error(kInvalidArgument) for an unknown name in
/// tuning_explicit or a result outside the ranges (Tuning::validate()).
Tuning resolve_tuning(const Config& requested, BackendKind backend, int world_size, const TuningEntry* entry,
                      const TuningEntry* compiled = nullptr);

}  // namespace symcomm::detail
