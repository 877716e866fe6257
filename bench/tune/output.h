#pragma once
// symcomm-tune's tuning file output: one entry (derived fields, provenance, raw measurements) merged into the
// file, the entries of other world sizes and devices kept. Format: docs/tuning.md, parsed by
// src/core/tuning_file.h. Pure (text in, text out); tested in tests/unit/tune_derive_test.cc.

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tune/derive.h"

namespace symcomm::tune {

struct Provenance {
  std::string date;             ///< ISO 8601, UTC
  std::string machine;          ///< host name
  std::string command;          ///< the command line that measured it
  std::string symcomm_version;  ///< the build's project version
  std::string backend;          ///< host | cuda
  std::string dtype;
  std::string mode;  ///< eager | graph (CUDA), eager (host)
};

/// The entry for `world_size` ranks on `device` ("host", or the GPU's name).
nlohmann::ordered_json make_entry(int world_size, const std::string& device, const Derived& derived,
                                  const std::vector<Sample>& samples, const Provenance& provenance);

/// `existing` (a tuning file's text; empty: none yet) with `entry` in place of the entry for the same world size
/// and device, or added after the others. Throws Error(kInvalidArgument) naming `path` where `existing` is not a
/// tuning file, so that a file that is not one is never overwritten; the result parses as one.
std::string merge_entry(const std::string& existing, const std::string& path, const nlohmann::ordered_json& entry);

/// `existing` (a tuning file's text) with every entry's "tuning" derived again from its "measurements" (host
/// entries as the host backend's, the others as CUDA's); provenance and measurements are kept. For a file measured
/// by an earlier derivation's symcomm-tune. Throws Error(kInvalidArgument) naming `path` where `existing` is not a
/// tuning file or an entry has no measurements.
std::string rederive(const std::string& existing, const std::string& path, const DeriveOptions& options);

}  // namespace symcomm::tune
