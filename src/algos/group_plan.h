#pragma once
// Pure planning functions of the CUDA multi-tensor group execution (NOTE [cuda group fusion] in
// src/backends/cuda/cuda_group_cuda.cc), kept free of CUDA so that tests/unit/group_plan_test.cc checks them as a
// table on any machine.

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "algos/request.h"

namespace symcomm::detail {

/// End of the run that starts at ops[begin]: the consecutive entries that may share one multi-tensor kernel
/// with it (all-reduce, reduce-scatter or all-gather; same collective, dtype, op for reductions, stream and
/// contention; algorithm left to symcomm; count > 0). begin + 1 when ops[begin] cannot start a run.
size_t group_run_end(const std::vector<std::pair<Request, Algorithm>>& ops, size_t begin);

/// Virtual offsets of tensors of counts[0..n) units concatenated with every offset padded to a multiple of
/// `align` units (no padding after the last). Returns the total (offset + count of the last; 0 if n == 0).
uint64_t virtual_offsets(const uint64_t* counts, size_t n, uint64_t align, uint64_t* offsets);

}  // namespace symcomm::detail
