// A program linked to the real libnccl.so.2 (DT_NEEDED libnccl.so.2), as PyTorch and nccl-tests are. ctest runs
// it with libsymcomm_nccl in front of NCCL (LD_PRELOAD, or found first under the name libnccl.so.2) and
// SYMCOMM_NCCL_REAL_LIBRARY naming the recording mock (argv[1]): its calls must reach the mock through the
// drop-in library, with their arguments. Run without the drop-in library, its calls reach the real NCCL and
// it fails, which ctest checks too (nccl_shim_preload_control).
// Exit status: 0 when every call reached the mock as made, 1 otherwise (what differed on stderr).

#include <dlfcn.h>
#include <nccl.h>

#include <cstdio>
#include <vector>

#include "mock_record.h"

using symcomm::nccl_mock::Call;
using symcomm::nccl_mock::make_call;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s MOCK_NCCL_PATH\n", argv[0]);
    return 2;
  }
  int version = 0;
  const ncclResult_t r = ncclGetVersion(&version);
  if (r != ncclSuccess || version != symcomm::nccl_mock::kMockVersion) {
    std::fprintf(stderr, "ncclGetVersion returned %d, version %d: the call did not reach the mock NCCL\n",
                 static_cast<int>(r), version);
    return 1;
  }
  void* mock = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (mock == nullptr) {
    std::fprintf(stderr, "the mock NCCL %s is not loaded\n", argv[1]);
    return 1;
  }
  const auto calls = reinterpret_cast<decltype(&symcomm_nccl_mock_calls)>(dlsym(mock, "symcomm_nccl_mock_calls"));
  const auto set_result =
      reinterpret_cast<decltype(&symcomm_nccl_mock_set_result)>(dlsym(mock, "symcomm_nccl_mock_set_result"));
  if (calls == nullptr || set_result == nullptr) {
    std::fprintf(stderr, "the mock NCCL lacks its control functions\n");
    return 1;
  }
  calls()->clear();
  set_result(ncclInProgress);

  const void* send = reinterpret_cast<const void*>(0x5e0d);
  void* recv = reinterpret_cast<void*>(0x7ec0);
  const size_t count = 0x0102030405060708ULL;
  const ncclComm_t comm = reinterpret_cast<ncclComm_t>(0xc011);
  const cudaStream_t stream = reinterpret_cast<cudaStream_t>(0x57e0);
  const ncclDataType_t datatype = ncclFloat8e5m2;
  const ncclRedOp_t op = ncclMax;
  const int peer = 3;
  int failures = 0;
  const auto expect = [&](const char* what, ncclResult_t got) {
    if (got != ncclInProgress) {
      std::fprintf(stderr, "%s returned %d, not the mock's %d\n", what, static_cast<int>(got),
                   static_cast<int>(ncclInProgress));
      ++failures;
    }
  };
  expect("ncclGroupStart", ncclGroupStart());
  expect("ncclAllReduce", ncclAllReduce(send, recv, count, datatype, op, comm, stream));
  expect("pncclSend", pncclSend(send, count, datatype, peer, comm, stream));
  expect("ncclRecv", ncclRecv(recv, count, datatype, peer, comm, stream));
  expect("ncclGroupEnd", ncclGroupEnd());
  const std::vector<Call> expected = {
      make_call("pncclGroupStart"),
      make_call("pncclAllReduce", send, recv, count, datatype, op, comm, stream),
      make_call("pncclSend", send, count, datatype, peer, comm, stream),
      make_call("pncclRecv", recv, count, datatype, peer, comm, stream),
      make_call("pncclGroupEnd"),
  };
  if (*calls() != expected) {
    std::fprintf(stderr, "the mock saw %zu calls:", calls()->size());
    for (const Call& c : *calls()) std::fprintf(stderr, " %s (%zu argument bytes)", c.name.c_str(), c.args.size());
    std::fprintf(stderr, "; expected %zu calls with the arguments made\n", expected.size());
    ++failures;
  }
  return failures == 0 ? 0 : 1;
}
