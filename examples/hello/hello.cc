// The README's example: start with `symcomm-run -n 2 -- ./hello`.
#include <symcomm/symcomm.h>

#include <cstdio>

int main() {
  try {
    auto comm = symcomm::Communicator::create_from_env({.backend = symcomm::BackendKind::kHost});
    size_t n = 1 << 20;
    auto* x = static_cast<float*>(comm->alloc(n * sizeof(float)));  // symmetric heap: zero-copy
    for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(comm->rank() + 1);
    comm->all_reduce(x, x, n, symcomm::DataType::kFloat32, symcomm::ReduceOp::kSum);
    float want = comm->world_size() * (comm->world_size() + 1) / 2.0f;
    bool ok = x[0] == want && x[n - 1] == want;
    std::printf("rank %d: x[0] = %g (expected %g) %s\n", comm->rank(), x[0], want, ok ? "ok" : "WRONG");
    comm->free(x);
    return ok ? 0 : 1;
  } catch (const symcomm::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
