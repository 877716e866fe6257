#include "symcomm/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>

#include "base/check.h"
#include "base/debug_fault.h"
#include "base/host_process.h"
#include "base/op_history.h"
#include "core/tuning_file.h"

namespace symcomm {
namespace {

// NOTE [one environment table]
// Every SYMCOMM_* variable is declared here once: name, documentation and a parser that writes the typed
// field of Config and throws on a malformed value. Nothing else in symcomm calls getenv for SYMCOMM_*.
struct EnvVar {
  const char* name;
  std::string doc;
  std::function<void(Config&, std::string_view)> parse;
  std::function<std::string(const Config&)> show;
};

constexpr uint64_t kMaxTimeoutMs = uint64_t{30} * 24 * 3600 * 1000;

uint64_t parse_u64(std::string_view name, std::string_view v) {
  // Accepts plain integers and K/M/G suffixes (powers of 1024) for byte sizes.
  uint64_t mult = 1;
  std::string_view digits = v;
  if (!digits.empty()) {
    switch (digits.back()) {
      case 'k':
      case 'K': mult = 1ull << 10; break;
      case 'm':
      case 'M': mult = 1ull << 20; break;
      case 'g':
      case 'G': mult = 1ull << 30; break;
      default: break;
    }
    if (mult != 1) digits.remove_suffix(1);
  }
  uint64_t out = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), out);
  SYMCOMM_CHECK_ARG(ec == std::errc() && ptr == digits.data() + digits.size() && !digits.empty(),
                    "{}='{}' is not a non-negative integer", name, v);
  SYMCOMM_CHECK_ARG(out <= UINT64_MAX / mult, "{}='{}' is too large", name, v);
  return out * mult;
}

bool parse_bool(std::string_view name, std::string_view v) {
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  SYMCOMM_THROW(kInvalidArgument, "{}='{}' is not a boolean (1/0/true/false)", name, v);
}

LogLevel parse_log_level(std::string_view name, std::string_view v) {
  if (v == "off" || v == "none") return LogLevel::kOff;
  if (v == "error") return LogLevel::kError;
  if (v == "warn" || v == "warning") return LogLevel::kWarn;
  if (v == "info") return LogLevel::kInfo;
  if (v == "debug" || v == "trace") return LogLevel::kDebug;
  SYMCOMM_THROW(kInvalidArgument, "{}='{}' is not one of off|error|warn|info|debug", name, v);
}

NcclInit parse_nccl_init(std::string_view name, std::string_view v) {
  if (v == "eager") return NcclInit::kEager;
  if (v == "lazy") return NcclInit::kLazy;
  if (v == "off") return NcclInit::kOff;
  SYMCOMM_THROW(kInvalidArgument, "{}='{}' is not one of eager|lazy|off", name, v);
}

const char* nccl_init_name(NcclInit n) {
  switch (n) {
    case NcclInit::kEager: return "eager";
    case NcclInit::kLazy: return "lazy";
    case NcclInit::kOff: return "off";
  }
  return "?";
}

const char* log_level_name(LogLevel l) {
  switch (l) {
    case LogLevel::kOff: return "off";
    case LogLevel::kError: return "error";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kInfo: return "info";
    case LogLevel::kDebug: return "debug";
  }
  return "?";
}

template <class T>
EnvVar size_var(const char* name, const char* doc, T Config::*field, uint64_t min_value, uint64_t max_value) {
  max_value = std::min<uint64_t>(max_value, static_cast<uint64_t>(std::numeric_limits<T>::max()));
  return EnvVar{name, doc,
                [=](Config& c, std::string_view v) {
                  uint64_t x = parse_u64(name, v);
                  SYMCOMM_CHECK_ARG(x >= min_value, "{}={} is below the minimum {}", name, x, min_value);
                  SYMCOMM_CHECK_ARG(x <= max_value, "{}={} is above the maximum {}", name, x, max_value);
                  c.*field = static_cast<T>(x);
                },
                [=](const Config& c) { return std::to_string(c.*field); }};
}

EnvVar bool_var(const char* name, const char* doc, bool Config::*field) {
  return EnvVar{name, doc, [=](Config& c, std::string_view v) { c.*field = parse_bool(name, v); },
                [=](const Config& c) { return std::string(c.*field ? "1" : "0"); }};
}

// NOTE [tuning ranges]
// Each Tuning field is declared here once: its variable, documentation and range. A value outside the range
// is refused, by from_env() as it parses the variable and by Tuning::validate() (which Communicator::create()
// calls for a Config built in code), naming the field, the variable and the range: a kernel that silently
// clamps a bad setting measures something else than what was asked for. The ranges come from the code that
// consumes each field: the block counts of the two-shot and staged one-shot kernels index the signal pad's
// device::kMaxBlocks (256) block slots; the LL and LL128 launches take 1-64 chunks or lines per thread or group
// and 1-1024 blocks of at most kThreads (512) threads; the LL and LL128 sizes are bounded by their buffers
// (kLLPayloadBytes, 1 MiB; kLL128PayloadBytes, 4 MiB); the staged one-shot moves 16-byte vectors. The byte
// thresholds of select() take every value. The kernels keep their clamps as a defensive bound: the two-shot's
// 0 (one block per SM) takes the SM count, which only its clamp keeps within the slots. The values that
// measured_cuda_tuning() (src/algos/select.cc) puts in for 3 or more ranks are byte thresholds and LL launch
// geometry within the ranges above (config_test checks every world size).
struct TuningVar {
  const char* env;
  const char* field_name;
  const char* doc;
  size_t Tuning::*field;
  uint64_t min = 0;
  uint64_t max = UINT64_MAX;
  uint64_t multiple = 1;  ///< the value must be a multiple of this
  bool zero_ok = false;   ///< 0 is allowed below min (an "automatic" value)
};

constexpr uint64_t kMiB = uint64_t{1} << 20;

const std::vector<TuningVar>& tuning_table() {
  // Order: as listed by --help-env and Config::settings().
  static const std::vector<TuningVar> table = {
      {.env = "SYMCOMM_HOST_ONE_SHOT_MAX_BYTES",
       .field_name = "host_one_shot_max_bytes",
       .doc = "host all-reduce: one-shot up to this size",
       .field = &Tuning::host_one_shot_max_bytes},
      {.env = "SYMCOMM_CUDA_ONE_SHOT_MAX_BYTES",
       .field_name = "cuda_one_shot_max_bytes",
       .doc = "CUDA all-reduce: one-shot up to this size",
       .field = &Tuning::cuda_one_shot_max_bytes},
      {.env = "SYMCOMM_CUDA_TWO_SHOT_MAX_BYTES",
       .field_name = "cuda_two_shot_max_bytes",
       .doc = "CUDA all-reduce: two-shot up to this size",
       .field = &Tuning::cuda_two_shot_max_bytes},
      {.env = "SYMCOMM_CUDA_TWO_SHOT_PUSH_MIN_BYTES",
       .field_name = "cuda_two_shot_push_min_bytes",
       .doc = "CUDA two-shot all-reduce into a symmetric output: push-only variant from this size on",
       .field = &Tuning::cuda_two_shot_push_min_bytes},
      {.env = "SYMCOMM_CUDA_NCCL_MIN_BYTES",
       .field_name = "cuda_nccl_min_bytes",
       .doc = "CUDA collectives: NCCL from this size on",
       .field = &Tuning::cuda_nccl_min_bytes},
      {.env = "SYMCOMM_CUDA_DIRECT_NCCL_MAX_BYTES",
       .field_name = "cuda_direct_nccl_max_bytes",
       .doc = "CUDA all_gather/reduce_scatter/all_to_all/broadcast: NCCL up to this size per rank",
       .field = &Tuning::cuda_direct_nccl_max_bytes},
      {.env = "SYMCOMM_CUDA_LL_CHUNKS_PER_THREAD",
       .field_name = "cuda_ll_chunks_per_thread",
       .doc = "CUDA LL all-reduce: 8-byte chunks per thread",
       .field = &Tuning::cuda_ll_chunks_per_thread,
       .min = 1,
       .max = 64},
      {.env = "SYMCOMM_CUDA_LL_MAX_BLOCKS",
       .field_name = "cuda_ll_max_blocks",
       .doc = "CUDA LL all-reduce: most blocks",
       .field = &Tuning::cuda_ll_max_blocks,
       .min = 1,
       .max = 1024},
      {.env = "SYMCOMM_CUDA_LL_BLOCK_THREADS",
       .field_name = "cuda_ll_block_threads",
       .doc = "CUDA LL all-reduce: threads per block",
       .field = &Tuning::cuda_ll_block_threads,
       .min = 32,
       .max = 512,
       .multiple = 32},
      {.env = "SYMCOMM_CUDA_LL_MAX_BYTES",
       .field_name = "cuda_ll_max_bytes",
       .doc = "CUDA one-shot all-reduce: LL kernel up to this size, at most its 1M buffer",
       .field = &Tuning::cuda_ll_max_bytes,
       .max = kMiB},
      {.env = "SYMCOMM_CUDA_LL_GATHER_MAX_BYTES",
       .field_name = "cuda_ll_gather_max_bytes",
       .doc = "CUDA all_gather / reduce_scatter / all_to_all / broadcast: LL kernel up to this size, at most its 1M "
              "buffer",
       .field = &Tuning::cuda_ll_gather_max_bytes,
       .max = kMiB},
      {.env = "SYMCOMM_CUDA_ONE_SHOT_BLOCK_BYTES",
       .field_name = "cuda_one_shot_block_bytes",
       .doc = "CUDA staged one-shot all-reduce: payload bytes per block",
       .field = &Tuning::cuda_one_shot_block_bytes,
       .min = 16},
      {.env = "SYMCOMM_CUDA_ONE_SHOT_MAX_BLOCKS",
       .field_name = "cuda_one_shot_max_blocks",
       .doc = "CUDA staged one-shot all-reduce: most blocks",
       .field = &Tuning::cuda_one_shot_max_blocks,
       .min = 1,
       .max = 256},
      {.env = "SYMCOMM_CUDA_TWO_SHOT_MAX_BLOCKS",
       .field_name = "cuda_two_shot_max_blocks",
       .doc = "CUDA two-shot all-reduce: most blocks, 0 = one per SM",
       .field = &Tuning::cuda_two_shot_max_blocks,
       .min = 1,
       .max = 256,
       .zero_ok = true},
      {.env = "SYMCOMM_CUDA_TWO_SHOT_BLOCK_BYTES",
       .field_name = "cuda_two_shot_block_bytes",
       .doc = "CUDA two-shot all-reduce: payload bytes per block",
       .field = &Tuning::cuda_two_shot_block_bytes,
       .min = 16},
      {.env = "SYMCOMM_CUDA_DIRECT_BLOCK_BYTES",
       .field_name = "cuda_direct_block_bytes",
       .doc = "CUDA direct all_gather / reduce_scatter / all_to_all: bytes of one rank's block per GPU block",
       .field = &Tuning::cuda_direct_block_bytes,
       .min = 16},
      {.env = "SYMCOMM_CUDA_DIRECT_MAX_BLOCKS",
       .field_name = "cuda_direct_max_blocks",
       .doc = "CUDA direct all_gather / reduce_scatter / all_to_all: most blocks",
       .field = &Tuning::cuda_direct_max_blocks,
       .min = 1,
       .max = 256},
      {.env = "SYMCOMM_CUDA_LL128_MAX_BYTES",
       .field_name = "cuda_ll128_max_bytes",
       .doc = "CUDA one-shot all-reduce: LL128 kernel above the LL range up to this size, at most its 4M buffer",
       .field = &Tuning::cuda_ll128_max_bytes,
       .max = 4 * kMiB},
      {.env = "SYMCOMM_CUDA_LL128_LINES_PER_GROUP",
       .field_name = "cuda_ll128_lines_per_group",
       .doc = "CUDA LL128 all-reduce: 128-byte lines per 8-lane group before another block",
       .field = &Tuning::cuda_ll128_lines_per_group,
       .min = 1,
       .max = 64},
      {.env = "SYMCOMM_CUDA_LL128_MAX_BLOCKS",
       .field_name = "cuda_ll128_max_blocks",
       .doc = "CUDA LL128 all-reduce: most blocks",
       .field = &Tuning::cuda_ll128_max_blocks,
       .min = 1,
       .max = 1024},
      {.env = "SYMCOMM_CUDA_LL128_TWO_SHOT_MAX_BYTES",
       .field_name = "cuda_ll128_two_shot_max_bytes",
       .doc = "CUDA two-shot all-reduce: LL128 two-shot kernel up to this size, at most world_size / 2 x 4M",
       .field = &Tuning::cuda_ll128_two_shot_max_bytes,
       .max = 16 * kMiB},
      {.env = "SYMCOMM_CUDA_LL128_GATHER_MAX_BYTES",
       .field_name = "cuda_ll128_gather_max_bytes",
       .doc = "CUDA all_gather / all_to_all: LL128 kernel above the LL range up to this size, at most its 4M buffer",
       .field = &Tuning::cuda_ll128_gather_max_bytes,
       .max = 4 * kMiB},
      {.env = "SYMCOMM_CUDA_LL128_REDUCE_SCATTER_MAX_BYTES",
       .field_name = "cuda_ll128_reduce_scatter_max_bytes",
       .doc = "CUDA reduce_scatter: LL128 kernel above the LL range up to this size, at most its 4M buffer",
       .field = &Tuning::cuda_ll128_reduce_scatter_max_bytes,
       .max = 4 * kMiB},
      {.env = "SYMCOMM_CUDA_PDL",
       .field_name = "cuda_pdl",
       .doc = "CUDA one-shot all-reduces: programmatic dependent launch, 0 = off",
       .field = &Tuning::cuda_pdl,
       .max = 1},
  };
  return table;
}

bool restricted(const TuningVar& v) { return v.min > 0 || v.max < UINT64_MAX || v.multiple > 1; }

// "32-512", "16 or more", "a multiple of 32 in 32-512", "0 or 1-256".
std::string range_text(const TuningVar& v) {
  std::string r = v.max == UINT64_MAX ? fmt::format("{} or more", v.min) : fmt::format("{}-{}", v.min, v.max);
  if (v.multiple > 1) r = fmt::format("a multiple of {} in {}", v.multiple, r);
  return v.zero_ok ? "0 or " + r : r;
}

void check_tuning(const TuningVar& v, uint64_t x) {
  const bool ok = (x == 0 && v.zero_ok) || (x >= v.min && x <= v.max && x % v.multiple == 0);
  SYMCOMM_CHECK_ARG(ok, "Tuning::{} ({}) = {} is outside its range: {}", v.field_name, v.env, x, range_text(v));
}

EnvVar tuning_env_var(const TuningVar& v) {
  static_assert(sizeof(size_t) <= sizeof(uint64_t));
  return EnvVar{v.env, restricted(v) ? fmt::format("{} ({})", v.doc, range_text(v)) : std::string(v.doc),
                [v](Config& c, std::string_view text) {
                  const uint64_t x = parse_u64(v.env, text);
                  check_tuning(v, x);
                  c.tuning.*v.field = static_cast<size_t>(x);
                  c.tuning_explicit.insert(v.field_name);  // NOTE [tuning precedence]
                },
                [v](const Config& c) { return std::to_string(c.tuning.*v.field); }};
}

std::vector<EnvVar> make_env_table() {
  std::vector<EnvVar> table = {
      {"SYMCOMM_TIMEOUT_MS", "deadline of every wait, in milliseconds",
       [](Config& c, std::string_view v) {
         uint64_t ms = parse_u64("SYMCOMM_TIMEOUT_MS", v);
         SYMCOMM_CHECK_ARG(ms > 0, "SYMCOMM_TIMEOUT_MS must be positive");
         // Deadlines are computed in nanoseconds: keep far from overflow (the bound is 30 days).
         SYMCOMM_CHECK_ARG(ms <= kMaxTimeoutMs, "SYMCOMM_TIMEOUT_MS={} is above the maximum {} (30 days)", ms,
                           kMaxTimeoutMs);
         c.timeout = std::chrono::milliseconds(ms);
       },
       [](const Config& c) { return std::to_string(c.timeout.count()); }},
      size_var("SYMCOMM_HEAP_BYTES", "symmetric heap per rank for alloc() (K/M/G suffixes)", &Config::heap_bytes,
               1 << 20, uint64_t{1} << 46),
      size_var("SYMCOMM_SCRATCH_BYTES", "host backend: staging memory per rank for buffers outside the heap",
               &Config::scratch_bytes, 64 << 10, uint64_t{1} << 40),
      size_var("SYMCOMM_CUDA_SCRATCH_BYTES", "CUDA backend: staging memory per rank (device memory)",
               &Config::cuda_scratch_bytes, 64 << 10, uint64_t{1} << 40),
      size_var("SYMCOMM_P2P_CHUNK_BYTES",
               "host backend: point-to-point staging chunk; each ordered pair of ranks has two (a send of up to two "
               "chunks completes without its receiver)",
               &Config::p2p_chunk_bytes, 4 << 10, uint64_t{1} << 30),
      {"SYMCOMM_LOG", "log level: off|error|warn|info|debug",
       [](Config& c, std::string_view v) { c.log_level = parse_log_level("SYMCOMM_LOG", v); },
       [](const Config& c) { return std::string(log_level_name(c.log_level)); }},
      bool_var("SYMCOMM_DEBUG_CHECKS", "check every collective's arguments across ranks before running it",
               &Config::debug_checks),
      {"SYMCOMM_NCCL", "CUDA backend: when its NCCL communicator is created: eager|lazy (at first use)|off",
       [](Config& c, std::string_view v) { c.nccl = parse_nccl_init("SYMCOMM_NCCL", v); },
       [](const Config& c) { return std::string(nccl_init_name(c.nccl)); }},
      bool_var("SYMCOMM_SHARED_GPU", "CUDA backend, testing only: ranks may share a GPU (slow: time-sliced; no NCCL)",
               &Config::shared_gpu),
      size_var("SYMCOMM_DEBUG_SEQ_START", "CUDA backend, testing only: the device sequence counter's first value",
               &Config::debug_seq_start, 0, 0xffffffffu),
      size_var("SYMCOMM_DEBUG_SIGNAL_LAG",
               "CUDA backend, testing only: how far behind that value the signal slots start (below 2^31)",
               &Config::debug_signal_lag, 0, 0x7fffffffu),
      size_var("SYMCOMM_OP_HISTORY", "recent operations remembered for the record written on a fatal error",
               &Config::op_history, 1, 1 << 20),
      {"SYMCOMM_TRACE_DIR",
       "existing directory where a fatal error's full operation record is written (empty: $TMPDIR, else /tmp)",
       [](Config& c, std::string_view v) { c.trace_dir = std::string(v); },
       [](const Config& c) { return c.trace_dir; }},
      {"SYMCOMM_TUNING_FILE",
       "tuning file (JSON, written by symcomm-tune; docs/tuning.md): its entry for the world size and GPU sets the "
       "tuning fields no SYMCOMM_* variable sets",
       [](Config& c, std::string_view v) { c.tuning_file = std::string(v); },
       [](const Config& c) { return c.tuning_file; }},
      {"SYMCOMM_TOPOLOGY_FILE",
       "topology file (JSON; docs/design/topology.md): all-reduces, all-gathers and reduce-scatters use only the "
       "links it gives (empty: every pair linked, or on CUDA the links detected)",
       [](Config& c, std::string_view v) { c.topology_file = std::string(v); },
       [](const Config& c) { return c.topology_file; }},
  };
  for (const TuningVar& v : tuning_table()) table.push_back(tuning_env_var(v));
  return table;
}

const std::vector<EnvVar>& env_table() {
  static const std::vector<EnvVar> table = make_env_table();
  return table;
}

}  // namespace

void Tuning::validate() const {
  for (const TuningVar& v : tuning_table()) check_tuning(v, this->*v.field);
}

namespace detail {

const std::vector<TuningField>& tuning_fields() {
  static const std::vector<TuningField> fields = [] {
    std::vector<TuningField> out;
    for (const TuningVar& v : tuning_table())
      out.push_back({.name = v.field_name, .env = v.env, .member = v.field, .max = v.max});
    return out;
  }();
  return fields;
}

const TuningField* find_tuning_field(std::string_view name) {
  for (const TuningField& f : tuning_fields()) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

}  // namespace detail

Config Config::from_env() {
  Config c;
  for (const EnvVar& var : env_table()) {
    if (const char* v = std::getenv(var.name); v != nullptr && *v != '\0') {
      var.parse(c, v);
    }
  }
  return c;
}

std::vector<std::pair<std::string, std::string>> Config::settings() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const EnvVar& var : env_table()) out.emplace_back(var.name, var.show(*this));
  return out;
}

std::string Config::env_help() {
  Config defaults;
  std::string out;
  for (const EnvVar& var : env_table()) {
    const std::string value = var.show(defaults);
    out += fmt::format("  {:<36} {} (default {})\n", var.name, var.doc, value.empty() ? "empty" : value);
  }
  return out;
}

}  // namespace symcomm

namespace symcomm::detail {

std::string trace_dir_of(const Config& config) {
  if (!config.trace_dir.empty()) return config.trace_dir;
  const char* tmp = std::getenv("TMPDIR");
  return tmp != nullptr && *tmp != '\0' ? std::string(tmp) : std::string("/tmp");
}

std::string nccl_host_id() {
  const char* v = std::getenv("NCCL_HOSTID");
  return v != nullptr ? std::string(v) : std::string();
}

// Testing only (src/base/debug_fault.h): SYMCOMM_DEBUG_FAULT=<site>@<rank>[,...], read at each call.
bool debug_fault(std::string_view site, int rank) {
  const char* env = std::getenv("SYMCOMM_DEBUG_FAULT");
  if (env == nullptr) return false;
  std::string_view rest(env);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    const size_t at = item.find('@');
    if (at == std::string_view::npos || item.substr(0, at) != site) continue;
    const std::string_view number = item.substr(at + 1);
    int r = -1;
    const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), r);
    if (ec == std::errc() && end == number.data() + number.size() && r == rank) return true;
  }
  return false;
}

}  // namespace symcomm::detail
