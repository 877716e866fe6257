#include "base/kernel_loading_cuda.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <mutex>
#include <vector>

#include "base/check.h"
#include "base/cuda_check.h"
#include "base/driver_api_cuda.h"
#include "base/logging.h"

namespace symcomm::detail {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<const void*> anchors;
};

Registry& registry() {
  static Registry r;  // constructed on first use: registrations run during static initialisation
  return r;
}

/// The module entry points (cuModuleEnumerateFunctions and cuFuncLoad appeared in the 12.4 driver API).
struct ModuleApi {
  decltype(&::cuModuleGetLoadingMode) get_loading_mode = nullptr;
  decltype(&::cuFuncGetModule) func_get_module = nullptr;
  decltype(&::cuModuleGetFunctionCount) get_function_count = nullptr;
  decltype(&::cuModuleEnumerateFunctions) enumerate_functions = nullptr;
  decltype(&::cuFuncLoad) func_load = nullptr;
};

template <class Fn>
bool resolve(Fn& fn, const char* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(name, &p, 12040, cudaEnableDefault, &status) != cudaSuccess ||
      status != cudaDriverEntryPointSuccess || p == nullptr) {
    return false;
  }
  fn = reinterpret_cast<Fn>(p);
  return true;
}

/// The table, or nullptr where the driver lacks one of the entry points.
const ModuleApi* module_api() {
  static const ModuleApi* api = [] {
    static ModuleApi a;
    const bool ok = resolve(a.get_loading_mode, "cuModuleGetLoadingMode") &&
                    resolve(a.func_get_module, "cuFuncGetModule") &&
                    resolve(a.get_function_count, "cuModuleGetFunctionCount") &&
                    resolve(a.enumerate_functions, "cuModuleEnumerateFunctions") && resolve(a.func_load, "cuFuncLoad");
    if (!ok) {
      SYMCOMM_LOG_INFO("the CUDA driver lacks the 12.4 module entry points: symcomm's kernels load lazily");
    }
    return ok ? &a : nullptr;
  }();
  return api;
}

void check(CUresult r, const char* what) {
  SYMCOMM_CHECK(r == CUDA_SUCCESS, kCuda, "{} failed while loading symcomm's kernels: {}", what,
                driver_error_string(r));
}

}  // namespace

bool register_kernel_module(const void* anchor_kernel) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  r.anchors.push_back(anchor_kernel);
  return true;
}

int kernel_module_count() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  return static_cast<int>(r.anchors.size());
}

void load_kernel_modules() {
  const ModuleApi* api = module_api();
  if (!api) return;
  CUmoduleLoadingMode mode = CU_MODULE_LAZY_LOADING;
  check(api->get_loading_mode(&mode), "cuModuleGetLoadingMode");
  if (mode == CU_MODULE_EAGER_LOADING) return;
  std::vector<const void*> anchors;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    anchors = r.anchors;
  }
  const auto t0 = std::chrono::steady_clock::now();
  size_t loaded = 0;
  std::vector<CUfunction> functions;
  for (const void* anchor : anchors) {
    cudaFunction_t f = nullptr;
    SYMCOMM_CUDA_CHECK(cudaGetFuncBySymbol(&f, anchor));
    CUmodule module = nullptr;
    check(api->func_get_module(&module, reinterpret_cast<CUfunction>(f)), "cuFuncGetModule");
    unsigned int count = 0;
    check(api->get_function_count(&count, module), "cuModuleGetFunctionCount");
    functions.assign(count, nullptr);
    check(api->enumerate_functions(functions.data(), count, module), "cuModuleEnumerateFunctions");
    for (CUfunction fn : functions) check(api->func_load(fn), "cuFuncLoad");
    loaded += count;
  }
  SYMCOMM_LOG_DEBUG("loaded {} kernels of {} modules in {:.1f} ms", loaded, anchors.size(),
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace symcomm::detail
