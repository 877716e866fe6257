#pragma once
// symcomm-targets: the speed targets, judged from symcomm-bench's JSON lines.
//
// Each target carries the number of the requirement that sets it (Result::issue, the table's first column):
// 3 the CUDA all-reduce and bandwidths, 4 the low-contention collectives, 6 the group and bucket patterns.
// Every number a target names is computed here from the rows of one or more runs (bench, cebench,
// contention, group and bucket steps of tools/gpu/check.sh), so that a GPU run prints the verdicts instead
// of someone reading them off the tables by hand. Only rows of the CUDA backend at the world size asked for
// (the targets' numbers are for 2 ranks) count. Where several rows share a key (the same
// collective, size, implementation and mode from two runs), the fastest counts, for symcomm and for NCCL alike.
// A target whose rows include a wrong result is judged kWrong, whatever its times.

#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace symcomm::bench::targets {

/// One measurement, as bench/report.cc writes it (the fields a target reads; the rest stays in `json`).
struct Row {
  std::string collective, backend, impl, algo, mode, dtype, op;
  size_t bytes = 0;
  int world_size = 0;
  double time_us = 0;
  double busbw_gbps = 0;
  long long wrong = 0;
  nlohmann::json json;  ///< the whole object, for the runner-specific fields (contention, group, bucket)
};

/// Parses JSON lines (blank lines skipped). A line that is not a JSON object with the fields of Row is
/// skipped and named in `errors` as "<source>:<line>: <why>".
std::vector<Row> parse_rows(std::istream& in, const std::string& source, std::vector<std::string>& errors);

enum class Verdict { kMet, kMissed, kNoData, kWrong, kInfo };
const char* to_string(Verdict v);

struct Result {
  int issue = 0;         ///< the number of the requirement that sets the target (3, 4 or 6)
  std::string target;    ///< the requirement's words, shortened
  std::string measured;  ///< per size, e.g. "64K 0.471, 256K 0.533"
  Verdict verdict = Verdict::kNoData;
};

/// Judges every target (requirements 3, 4 and 6) on the rows of `world_size` ranks (CUDA backend; the group and
/// bucket patterns also on the host backend, as information). Lines of kind kInfo carry the competitor's
/// numbers the requirements ask to see beside symcomm's (NCCL's GEMM slowdown).
std::vector<Result> evaluate(const std::vector<Row>& rows, int world_size);

/// A markdown table: issue, target, measured, verdict.
std::string to_markdown(const std::vector<Result>& results);

/// "4K", "64M", or the bytes when not a whole number of KiB.
std::string size_label(size_t bytes);

}  // namespace symcomm::bench::targets
