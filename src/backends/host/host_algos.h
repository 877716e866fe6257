#pragma once
// Host collectives, one per file (host_<name>.cc), each built on the step protocol of HostEngine.
// Every function runs one whole, validated request; all ranks compute bitwise-identical results.

#include "algos/schedule.h"
#include "backends/host/host_engine.h"

namespace symcomm::detail {

void host_all_reduce_one_shot(HostEngine& e, const Request& r);
void host_all_reduce_two_shot(HostEngine& e, const Request& r);
/// The all-reduce over the links of a topology, by schedule `s` (host_scheduled.cc).
void host_all_reduce_scheduled(HostEngine& e, const Request& r, const Schedule& s);
/// Reduce-scatter or all-gather (r.kind) over a topology's links (host_scheduled.cc).
void host_gather_scheduled(HostEngine& e, const Request& r, const Schedule& s);
void host_all_gather(HostEngine& e, const Request& r);
void host_reduce_scatter(HostEngine& e, const Request& r);
/// A bucket flush's reduce-scatter (NOTE [host gathered flush] in host_reduce_scatter.cc).
void host_reduce_scatter_gathered(HostEngine& e, const GatheredReduceScatter& g);
/// The variant of a bucket flush's steps (NOTE [step variant]): a non-zero fold of its input layout.
uint32_t host_gathered_variant(const GatheredReduceScatter& g);
void host_broadcast(HostEngine& e, const Request& r);
void host_all_to_all(HostEngine& e, const Request& r);
void host_barrier(HostEngine& e, const Request& r);

}  // namespace symcomm::detail
