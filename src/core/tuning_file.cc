#include "core/tuning_file.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "algos/select.h"
#include "base/check.h"

namespace symcomm::detail {

// NOTE [tuning precedence]
// A communicator puts its Tuning together once, at creation, and selection and kernels use it as it is:
//   1. a field set explicitly: a SYMCOMM_* tuning variable (from_env() records it in Config::tuning_explicit),
//      a name in tuning_explicit of a Config built in code, or a field of such a Config whose value differs
//      from Tuning's default (code assigns fields; that is how it sets them);
//   2. otherwise the value of the tuning file's entry for this world size and device (Config::tuning_file;
//      the GPU's name as CUDA reports it, "host" on the host backend);
//   3. otherwise the value of the compiled-in table's entry for this world size and device (compiled_tuning():
//      src/core/tuning_defaults.json, symcomm-tune's output on the machines it names, built into the library);
//   4. otherwise, on the CUDA backend, the value compiled in for this world size on any GPU (measured_cuda_tuning()
//      on Tuning's defaults; NOTE [measured CUDA thresholds]);
//   5. otherwise Tuning's default.
// Explicit settings are tracked by name, not found by comparing with the defaults, so an explicit value equal
// to a default (SYMCOMM_CUDA_ONE_SHOT_MAX_BYTES=4M at 4 ranks) is kept instead of being taken for "unset".
// The result is checked by Tuning::validate(), and every value of a file is checked against its field's range
// when the file is parsed, whichever entry applies. The ranks compare the resulting Tuning field by field at
// creation (NOTE [configuration agreement] in communicator.cc): ranks that read different files, or whose GPUs
// pick different entries, fail there instead of selecting different algorithms for the same call.

namespace {

[[noreturn]] void bad_file(const std::string& path, const std::string& problem) {
  SYMCOMM_THROW(kInvalidArgument, "tuning file '{}': {}", path, problem);
}

const char* type_name(const nlohmann::json& j) { return j.type_name(); }

void check_keys(const std::string& path, const std::string& where, const nlohmann::json& object,
                const std::set<std::string>& allowed) {
  for (const auto& [key, value] : object.items()) {
    if (!allowed.contains(key)) {
      std::string names;
      for (const std::string& a : allowed) names += (names.empty() ? "" : ", ") + a;
      bad_file(path, fmt::format("{} has an unknown key '{}' (known: {})", where, key, names));
    }
  }
}

TuningEntry parse_entry(const std::string& path, size_t index, const nlohmann::json& e) {
  const std::string where = fmt::format("entries[{}]", index);
  if (!e.is_object()) bad_file(path, fmt::format("{} is a {}, not an object", where, type_name(e)));
  check_keys(path, where, e, {"world_size", "device", "tuning", "provenance", "measurements"});
  TuningEntry entry;
  const auto ws = e.find("world_size");
  if (ws == e.end() || !ws->is_number_unsigned() || ws->get<uint64_t>() < 1 ||
      ws->get<uint64_t>() > static_cast<uint64_t>(kMaxRanks)) {
    bad_file(path, fmt::format("{}.world_size must be an integer in 1-{}", where, kMaxRanks));
  }
  entry.world_size = static_cast<int>(ws->get<uint64_t>());
  const auto dev = e.find("device");
  if (dev == e.end() || !dev->is_string() || dev->get<std::string>().empty()) {
    bad_file(path,
             fmt::format("{}.device must be a non-empty string (a GPU's name, or \"{}\")", where, kHostTuningDevice));
  }
  entry.device = dev->get<std::string>();
  const std::string name = fmt::format("{} ({} ranks on '{}')", where, entry.world_size, entry.device);
  const auto tuning = e.find("tuning");
  if (tuning == e.end() || !tuning->is_object()) bad_file(path, fmt::format("{}.tuning must be an object", name));
  if (const auto p = e.find("provenance"); p != e.end() && !p->is_object()) {
    bad_file(path, fmt::format("{}.provenance must be an object", name));
  }
  if (const auto m = e.find("measurements"); m != e.end() && !m->is_array()) {
    bad_file(path, fmt::format("{}.measurements must be an array", name));
  }
  Tuning t;  // the entry's values over the defaults, for Tuning::validate()'s range checks
  for (const auto& [field_name, value] : tuning->items()) {
    const TuningField* f = find_tuning_field(field_name);
    if (f == nullptr) bad_file(path, fmt::format("{}.tuning has an unknown field '{}'", name, field_name));
    if (!value.is_number_unsigned()) {
      bad_file(path,
               fmt::format("{}.tuning.{} must be a non-negative integer, not {}", name, field_name, value.dump()));
    }
    static_assert(sizeof(size_t) == sizeof(uint64_t));
    const size_t v = value.get<uint64_t>();
    t.*f->member = v;
    entry.values.emplace_back(field_name, v);
  }
  // One LL128 bound for every gather, reduce-scatter included, where the entry has no reduce-scatter bound.
  if (tuning->contains("cuda_ll128_gather_max_bytes") && !tuning->contains("cuda_ll128_reduce_scatter_max_bytes")) {
    entry.values.emplace_back("cuda_ll128_reduce_scatter_max_bytes", t.cuda_ll128_gather_max_bytes);
  }
  try {
    t.validate();
  } catch (const Error& err) {
    bad_file(path, fmt::format("{}: {}", name, err.message()));
  }
  return entry;
}

}  // namespace

const TuningEntry* TuningFile::find(int world_size, std::string_view device) const {
  for (const TuningEntry& e : entries) {
    if (e.world_size == world_size && e.device == device) return &e;
  }
  return nullptr;
}

TuningFile parse_tuning_file(std::string_view text, const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    bad_file(path, fmt::format("not valid JSON: {}", e.what()));
  }
  if (!j.is_object()) bad_file(path, fmt::format("the top level is a {}, not an object", type_name(j)));
  check_keys(path, "the top level", j, {"format", "version", "entries"});
  const auto format = j.find("format");
  if (format == j.end() || !format->is_string() || format->get<std::string>() != kTuningFileFormat) {
    bad_file(path, fmt::format("\"format\" must be \"{}\"", kTuningFileFormat));
  }
  const auto version = j.find("version");
  if (version == j.end() || !version->is_number_integer() || version->get<int64_t>() != kTuningFileVersion) {
    bad_file(path, fmt::format("\"version\" must be {} (this build of symcomm reads version {})", kTuningFileVersion,
                               kTuningFileVersion));
  }
  const auto entries = j.find("entries");
  if (entries == j.end() || !entries->is_array()) bad_file(path, "\"entries\" must be an array");
  TuningFile file;
  file.path = path;
  for (size_t i = 0; i < entries->size(); ++i) {
    TuningEntry e = parse_entry(path, i, (*entries)[i]);
    if (file.find(e.world_size, e.device) != nullptr) {
      bad_file(path, fmt::format("entries[{}] is a second entry for {} ranks on '{}'", i, e.world_size, e.device));
    }
    file.entries.push_back(std::move(e));
  }
  return file;
}

std::string read_config_file(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  SYMCOMM_CHECK_ARG(in, "{} '{}': cannot be opened: {}", what, path, std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  SYMCOMM_CHECK_ARG(!in.bad(), "{} '{}': cannot be read", what, path);
  return text.str();
}

TuningFile read_tuning_file(const std::string& path) {
  return parse_tuning_file(read_config_file(path, "tuning file"), path);
}

/// The text of src/core/tuning_defaults.json, built into the library (tuning_defaults.cc.in, src/CMakeLists.txt).
std::string_view compiled_tuning_text();

const TuningFile& compiled_tuning() {
  static const TuningFile file = parse_tuning_file(compiled_tuning_text(), "src/core/tuning_defaults.json");
  return file;
}

Tuning resolve_tuning(const Config& requested, BackendKind backend, int world_size, const TuningEntry* entry,
                      const TuningEntry* compiled) {
  for (const std::string& name : requested.tuning_explicit) {
    SYMCOMM_CHECK_ARG(find_tuning_field(name) != nullptr,
                      "Config::tuning_explicit names '{}', which is no Tuning field", name);
  }
  const Tuning defaults;
  Tuning t = backend == BackendKind::kCuda ? measured_cuda_tuning(defaults, world_size) : defaults;
  for (const TuningEntry* e : {compiled, entry}) {
    if (e == nullptr) continue;
    for (const auto& [name, value] : e->values) {
      const TuningField* f = find_tuning_field(name);
      SYMCOMM_CHECK(f != nullptr, kInternal, "tuning entry with unknown field '{}'", name);
      t.*f->member = value;
    }
  }
  for (const TuningField& f : tuning_fields()) {
    if (requested.tuning_explicit.contains(f.name) || requested.tuning.*f.member != defaults.*f.member) {
      t.*f.member = requested.tuning.*f.member;
    }
  }
  t.validate();
  return t;
}

}  // namespace symcomm::detail
