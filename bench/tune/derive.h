#pragma once
// symcomm-tune's derivation: from the measured time of each path of each collective at each size to the Tuning
// fields that make the selector pick the fastest table of paths its thresholds can express. Pure (no ranks, no
// GPU); tested as tables in tests/unit/tune_derive_test.cc. NOTE [threshold derivation] in derive.cc.

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "symcomm/types.h"

namespace symcomm::tune {

// Paths, as Sample::path and the tuning file's measurements name them.
inline constexpr const char* kPathLL = "ll";             ///< CUDA LL kernels (all-reduce one-shot; gathers)
inline constexpr const char* kPathLL128 = "ll128";       ///< CUDA LL128 one-shot all-reduce; the gathers on LL128 lines
inline constexpr const char* kPathOneShot = "one_shot";  ///< staged one-shot all-reduce (CUDA), one-shot (host)
inline constexpr const char* kPathLL128TwoShot = "ll128_two_shot";  ///< CUDA LL128 two-shot all-reduce
inline constexpr const char* kPathTwoShot = "two_shot";             ///< two-shot all-reduce pulling the peers' inputs
inline constexpr const char* kPathTwoShotPush = "two_shot_push";    ///< two-shot pushing into the peers' outputs
inline constexpr const char* kPathDirect = "direct";                ///< CUDA direct kernels of the gathers
inline constexpr const char* kPathNccl = "nccl";                    ///< NCCL through symcomm's NCCL communicator

/// One measured point.
struct Sample {
  std::string collective;  ///< to_string(Collective): "all_reduce", "all_gather", ...
  std::string path;
  size_t bytes = 0;     ///< what the selector compares: all_reduce and broadcast payload, the others' per-rank block
  double time_us = 0;   ///< median over batches; 0 or less: not measured
  long long wrong = 0;  ///< wrong elements on all ranks: above 0 disqualifies the sample; -1: not verifiable
};

/// The paths one selector decision orders by size, smaller sizes first, and the collectives it decides for.
struct Chain {
  std::string name;
  std::vector<std::string> collectives;
  std::vector<std::string> paths;
};

/// Which path of a chain serves each size: path i serves sizes [ends[i-1], ends[i]) (ends[-1] = 0).
struct Segmentation {
  std::vector<size_t> ends;  ///< one per path, nondecreasing, the last one the number of sizes
  double loss = 0;           ///< counted relative loss (NOTE [threshold derivation])
  int segments = 0;          ///< paths that serve at least one size
  double raw_loss = 0;       ///< relative loss without the tolerance
  bool feasible = false;     ///< false: no segmentation avoids a path that cannot serve some size
};

/// Best monotone segmentation of `sizes` sizes over `paths` paths: counted[p][k] and raw[p][k] are the losses of
/// path p at size k (infinity: p cannot serve size k). Minimises counted loss, then segments, then raw loss.
Segmentation best_segmentation(const std::vector<std::vector<double>>& counted,
                               const std::vector<std::vector<double>>& raw);

/// A chain's outcome, for the report.
struct ChainResult {
  Chain chain;
  std::vector<size_t> sizes;  ///< ascending
  std::vector<int> chosen;    ///< per size, the index in chain.paths of the path that serves it
};

struct Derived {
  std::vector<std::pair<std::string, size_t>> fields;  ///< Tuning field name and value, in the config table's order
  std::vector<ChainResult> chains;
  std::vector<std::string> disqualified;  ///< "all_reduce ll128 at 4194304 bytes: 12 wrong elements"
};

struct DeriveOptions {
  /// A path within this fraction of the fastest at a size counts as tied with it there (noise).
  double tolerance = 0.03;
};

/// The Tuning fields for `samples` on `backend` (host: host_one_shot_max_bytes; CUDA: the byte thresholds of
/// the all-reduce and gather chains whose collectives were measured). Fields whose paths were not measured at
/// all (NCCL where it is unavailable, chains of collectives not measured) are left out.
Derived derive(BackendKind backend, const std::vector<Sample>& samples, const DeriveOptions& options = {});

/// The report rank 0 prints at the end: per chain and collective, the time of each path at each size (the
/// fastest marked *), the path chosen, then the fields.
std::string format_report(const Derived& derived, const std::vector<Sample>& samples);

}  // namespace symcomm::tune
