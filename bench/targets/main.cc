// symcomm-targets: prints the verdict on every speed target (requirements 3, 4 and 6; bench/targets/targets.h)
// from symcomm-bench's JSON lines. Needs no GPU:
//   symcomm-targets OUT/bench.json OUT/ce_bench.json OUT/contention.json OUT/group.json OUT/bucket.json
// Exit status: 0 every target with data met, 1 one missed or had wrong results, 2 unreadable input.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>

#include "targets/targets.h"

int main(int argc, char** argv) {
  namespace t = symcomm::bench::targets;
  CLI::App app{"symcomm-targets: the issues' speed targets judged from symcomm-bench --json files"};
  std::vector<std::string> files;
  int world = 2;
  app.add_option("files", files, "JSON lines written by symcomm-bench --json")->required();
  app.add_option("--world", world, "world size whose rows count (the issues' targets are for 2)");
  CLI11_PARSE(app, argc, argv);

  std::vector<t::Row> rows;
  std::vector<std::string> errors;
  for (const std::string& f : files) {
    std::ifstream in(f);
    if (!in) {
      std::fprintf(stderr, "symcomm-targets: cannot read %s\n", f.c_str());
      return 2;
    }
    std::vector<t::Row> got = t::parse_rows(in, f, errors);
    rows.insert(rows.end(), got.begin(), got.end());
  }
  for (const std::string& e : errors) std::fprintf(stderr, "symcomm-targets: skipped %s\n", e.c_str());
  const std::vector<t::Result> results = t::evaluate(rows, world);
  std::printf("# speed targets, %d ranks (%zu rows from %zu files)\n%s", world, rows.size(), files.size(),
              t::to_markdown(results).c_str());
  for (const t::Result& r : results) {
    if (r.verdict == t::Verdict::kMissed || r.verdict == t::Verdict::kWrong) return 1;
  }
  return 0;
}
