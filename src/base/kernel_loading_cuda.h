#pragma once
// Loading every symcomm kernel into a device's context when a CUDA communicator is created.
//
// NOTE [kernel loading] With lazy loading (CUDA_MODULE_LOADING=LAZY, the default since CUDA 12.2) a kernel is
// loaded at its first launch, and loading a module waits, holding the context, for the work queued on the device
// to drain (the lazy-loading hazards of the CUDA programming guide). On 4 x H200 the first all-reduce of a
// communicator, enqueued behind a 500 ms host function, returned only after that function had ended in 4 of 6
// runs of GpuGroup.AsyncWorkOfASynchronouslyEndedGroupWaitsForTheDevice. Worse, symcomm's kernels spin until
// their peers arrive: a first launch on one rank that waits for its own earlier kernel, while that kernel waits
// for a peer stuck the same way, stalls both until the deadline. So a communicator loads every kernel of every
// symcomm module at creation (cuModuleEnumerateFunctions and cuFuncLoad, CUDA 12.4 drivers and later; older
// drivers keep lazy loading), and no collective's launch loads anything (GpuLoading.*). Each translation unit
// with kernels registers itself through the anchor kernel that algos/cuda_common.cuh defines in it (one module
// per translation unit: no relocatable device code). cuBLASLt's kernels (fused operations) still load lazily.

namespace symcomm::detail {

/// Registers the module of `anchor_kernel` (a __global__ function's address); called during static
/// initialisation, touches no CUDA state. Returns true.
bool register_kernel_module(const void* anchor_kernel);

/// Loads every kernel of every registered module into the current device's context (no-op where the driver
/// lacks the 12.4 entry points or loading is eager). Throws Error(kCuda) if a load fails.
void load_kernel_modules();

/// Number of registered modules (tests).
int kernel_module_count();

}  // namespace symcomm::detail
