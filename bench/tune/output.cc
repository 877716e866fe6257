#include "tune/output.h"

#include <cmath>

#include "base/check.h"
#include "core/tuning_file.h"

namespace symcomm::tune {

namespace {

nlohmann::ordered_json tuning_object(const Derived& derived) {
  nlohmann::ordered_json tuning = nlohmann::ordered_json::object();
  for (const auto& [name, value] : derived.fields) tuning[name] = static_cast<uint64_t>(value);
  return tuning;
}

}  // namespace

nlohmann::ordered_json make_entry(int world_size, const std::string& device, const Derived& derived,
                                  const std::vector<Sample>& samples, const Provenance& provenance) {
  const nlohmann::ordered_json tuning = tuning_object(derived);
  nlohmann::ordered_json measurements = nlohmann::ordered_json::array();
  for (const Sample& s : samples) {
    measurements.push_back({{"collective", s.collective},
                            {"path", s.path},
                            {"bytes", s.bytes},
                            {"time_us", std::round(s.time_us * 1000) / 1000},
                            {"wrong", s.wrong}});
  }
  return {{"world_size", world_size},
          {"device", device},
          {"tuning", tuning},
          {"provenance",
           {{"date", provenance.date},
            {"machine", provenance.machine},
            {"command", provenance.command},
            {"symcomm_version", provenance.symcomm_version},
            {"backend", provenance.backend},
            {"dtype", provenance.dtype},
            {"mode", provenance.mode}}},
          {"measurements", measurements}};
}

std::string merge_entry(const std::string& existing, const std::string& path, const nlohmann::ordered_json& entry) {
  nlohmann::ordered_json file = {{"format", std::string(detail::kTuningFileFormat)},
                                 {"version", detail::kTuningFileVersion},
                                 {"entries", nlohmann::ordered_json::array()}};
  if (!existing.empty()) {
    detail::parse_tuning_file(existing, path);  // throws for anything that is not a tuning file
    file = nlohmann::ordered_json::parse(existing);
  }
  nlohmann::ordered_json& entries = file["entries"];
  bool replaced = false;
  for (nlohmann::ordered_json& e : entries) {
    if (e["world_size"] == entry["world_size"] && e["device"] == entry["device"]) {
      e = entry;
      replaced = true;
    }
  }
  if (!replaced) entries.push_back(entry);
  std::string text = file.dump(2) + "\n";
  detail::parse_tuning_file(text, path);  // what is written is what communicators accept
  return text;
}

std::string rederive(const std::string& existing, const std::string& path, const DeriveOptions& options) {
  detail::parse_tuning_file(existing, path);  // throws for anything that is not a tuning file
  nlohmann::ordered_json file = nlohmann::ordered_json::parse(existing);
  for (nlohmann::ordered_json& e : file["entries"]) {
    const auto m = e.find("measurements");
    SYMCOMM_CHECK_ARG(m != e.end() && !m->empty(),
                      "tuning file '{}': the entry for {} ranks on '{}' has no measurements", path,
                      e["world_size"].dump(), e["device"].get<std::string>());
    std::vector<Sample> samples;
    for (const auto& s : *m) {
      try {
        samples.push_back({.collective = s.at("collective").get<std::string>(),
                           .path = s.at("path").get<std::string>(),
                           .bytes = s.at("bytes").get<size_t>(),
                           .time_us = s.at("time_us").get<double>(),
                           .wrong = s.at("wrong").get<long long>()});
      } catch (const nlohmann::json::exception& x) {
        SYMCOMM_THROW(kInvalidArgument, "tuning file '{}': measurement {} of the entry for {} ranks on '{}': {}", path,
                      s.dump(), e["world_size"].dump(), e["device"].get<std::string>(), x.what());
      }
    }
    const bool host = e["device"].get<std::string>() == detail::kHostTuningDevice;
    e["tuning"] = tuning_object(derive(host ? BackendKind::kHost : BackendKind::kCuda, samples, options));
  }
  std::string text = file.dump(2) + "\n";
  detail::parse_tuning_file(text, path);  // what is written is what communicators accept
  return text;
}

}  // namespace symcomm::tune
