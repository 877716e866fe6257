// Tests of libsymcomm_nccl (src/nccl_shim), the NCCL drop-in library, against the recording mock NCCL
// (mock_nccl.cc): every function, under both of its names, reaches the mock with its arguments unchanged and
// the mock's results come back; the drop-in library's own failures (no real library, itself or a copy of itself
// as the real library, a function the real library lacks, a mode this build does not have) return their codes
// and texts and never recurse; two threads' calls and results stay apart.
//
// Each test opens a fresh instance of the drop-in library: a copy of libsymcomm_nccl.so in a directory of its
// own, opened with RTLD_LOCAL. To the dynamic loader a copy is another library, so each instance reads the
// environment its test sets and looks for the real library anew.

#include <arpa/inet.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <latch>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "harness/scoped_env.h"
#include "mock_record.h"
#if SYMCOMM_NCCL_SHIM_HAS_NATIVE
#include "id_stamp.h"
#endif

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // ncclResetDebugInit

namespace {

namespace fs = std::filesystem;
using symcomm::nccl_mock::Call;
using symcomm::nccl_mock::kMockInt;
using symcomm::nccl_mock::kMockTeam;
using symcomm::nccl_mock::kMockVersion;
using symcomm::nccl_mock::make_call;
using symcomm::testing::ScopedEnvSet;

const char* const kDropInPath = SYMCOMM_NCCL_DROP_IN_PATH;
const char* const kMockPath = SYMCOMM_NCCL_MOCK_PATH;
const char* const kPartialMockPath = SYMCOMM_NCCL_PARTIAL_MOCK_PATH;

// A scratch directory, removed with what it holds when the test ends.
class TempDir {
 public:
  TempDir() {
    std::string name = (fs::temp_directory_path() / "symcomm-nccl-shim-XXXXXX").string();
    if (mkdtemp(name.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = name;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  fs::path operator/(const char* name) const { return path_ / name; }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Each mock stays loaded once a drop-in library has opened it: where one is, its calls on this thread return
// ncclSuccess again and its record is emptied (what a test before left there does not reach the next).
void reset_loaded_mocks() {
  for (const char* path : {kMockPath, kPartialMockPath}) {
    void* mock = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (mock == nullptr) continue;
    reinterpret_cast<decltype(&symcomm_nccl_mock_calls)>(dlsym(mock, "symcomm_nccl_mock_calls"))()->clear();
    reinterpret_cast<decltype(&symcomm_nccl_mock_set_result)>(dlsym(mock, "symcomm_nccl_mock_set_result"))(ncclSuccess);
    reinterpret_cast<decltype(&symcomm_nccl_mock_set_id_bytes)>(dlsym(mock, "symcomm_nccl_mock_set_id_bytes"))(
        sizeof(ncclUniqueId));
    dlclose(mock);
  }
}

// A fresh instance of the drop-in library: the built one copied to `path` and opened there.
class DropIn {
 public:
  explicit DropIn(const fs::path& path) : path_(path) {
    reset_loaded_mocks();
    fs::copy_file(kDropInPath, path, fs::copy_options::overwrite_existing);
    handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) throw std::runtime_error(std::string("dlopen of the drop-in library: ") + dlerror());
  }
  ~DropIn() { dlclose(handle_); }
  DropIn(const DropIn&) = delete;
  DropIn& operator=(const DropIn&) = delete;

  template <class Fn>
  Fn fn(const std::string& name) const {
    void* f = dlsym(handle_, name.c_str());
    if (f == nullptr) throw std::runtime_error("the drop-in library exports no " + name);
    return reinterpret_cast<Fn>(f);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
  void* handle_ = nullptr;
};

// The mock as the drop-in library loaded it (RTLD_NOLOAD: the test never loads it itself).
class Mock {
 public:
  explicit Mock(const char* path) {
    handle_ = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (handle_ == nullptr) throw std::runtime_error(std::string("the mock NCCL is not loaded: ") + path);
    calls_ = reinterpret_cast<decltype(calls_)>(dlsym(handle_, "symcomm_nccl_mock_calls"));
    set_result_ = reinterpret_cast<decltype(set_result_)>(dlsym(handle_, "symcomm_nccl_mock_set_result"));
    error_string_ = reinterpret_cast<decltype(error_string_)>(dlsym(handle_, "symcomm_nccl_mock_error_string"));
    if (calls_ == nullptr || set_result_ == nullptr || error_string_ == nullptr) {
      throw std::runtime_error("the mock NCCL lacks its control functions");
    }
  }
  ~Mock() { dlclose(handle_); }
  Mock(const Mock&) = delete;
  Mock& operator=(const Mock&) = delete;

  // Empties the calling thread's record; its ncclResult_t functions return `result` on this thread.
  void reset(ncclResult_t result) {
    calls_()->clear();
    set_result_(result);
  }
  // The calling thread's record since the last reset() or take().
  std::vector<Call> take() {
    std::vector<Call> calls = *calls_();
    calls_()->clear();
    return calls;
  }
  const char* error_string(ncclResult_t result) const { return error_string_(result); }

 private:
  void* handle_ = nullptr;
  decltype(&symcomm_nccl_mock_calls) calls_ = nullptr;
  decltype(&symcomm_nccl_mock_set_result) set_result_ = nullptr;
  decltype(&symcomm_nccl_mock_error_string) error_string_ = nullptr;
};

// The environment of a drop-in library that forwards to `real` (nullopt: unset, the library searches).
ScopedEnvSet drop_in_env(std::optional<std::string> real, std::optional<std::string> mode = std::nullopt,
                         std::optional<std::string> library_path = std::nullopt) {
  return ScopedEnvSet(
      {{"SYMCOMM_NCCL_REAL_LIBRARY", real}, {"SYMCOMM_NCCL_SHIM", mode}, {"LD_LIBRARY_PATH", library_path}});
}

template <class T>
T* fake_ptr(uintptr_t v) {
  return reinterpret_cast<T*>(v);
}

// One value per parameter, each distinct from every other of its type, so that an argument passed in another
// parameter's place shows in the record. Pointers are made up, except where the mock writes through them.
struct Values {
  int int_storage = 0;
  ncclComm_t comm_storage = nullptr;
  ncclUniqueId id_storage[2] = {};
  const void* send = fake_ptr<const void>(0x5e0d0001);
  void* recv = fake_ptr<void>(0x7ec00002);
  void* buff = fake_ptr<void>(0xb0ff0003);
  void* scalar = fake_ptr<void>(0x5ca10004);
  void** ptr_out = fake_ptr<void*>(0x0b0e0005);
  void** handle_out = fake_ptr<void*>(0x4a0d0006);
  void* handle = fake_ptr<void>(0x4a0d0007);
  size_t count = 0x0102030405060708ULL;
  size_t size = 0x1112131415161718ULL;
  ncclDataType_t datatype = ncclBfloat16;
  ncclRedOp_t op = ncclAvg;
  ncclScalarResidence_t residence = ncclScalarHostImmediate;
  int root = 0x3f;
  int peer = 0x2e;
  int nranks = 0x1d;
  int rank = 0x0c;
  int color = -7;
  int key = 0x600d;
  int flags = 0x11;
  int ndev = 0x22;
  int n_barriers = 0x33;
  int n_blocks = 0x44;
  int n_slots = 0x55;
  const int* devlist = fake_ptr<const int>(0xde0008);
  int* ranks_out = fake_ptr<int>(0x1e0009);
  int* int_out = &int_storage;
  ncclComm_t comm = fake_ptr<ncclComm>(0xc0110000b);
  ncclComm_t* comm_out = &comm_storage;
  ncclResult_t* result_out = fake_ptr<ncclResult_t>(0x4e5000d);
  ncclRedOp_t* op_out = fake_ptr<ncclRedOp_t>(0x0900e);
  ncclWindow_t win = fake_ptr<ncclWindow_vidmem>(0x3170000f);
  ncclWindow_t* win_out = fake_ptr<ncclWindow_t>(0x31700010);
  ncclSimInfo_t* sim_info = fake_ptr<ncclSimInfo_t>(0x51300011);
  ncclUniqueId* ids = id_storage;
  ncclDevCommRequirements_t const* reqs = fake_ptr<const ncclDevCommRequirements_t>(0x4e900013);
  ncclDevComm_t* dev_comm_out = fake_ptr<ncclDevComm_t>(0xdec00014);
  ncclDevComm_t const* dev_comm = fake_ptr<const ncclDevComm_t>(0xdec00015);
  ncclLsaBarrierHandle_t* lsa_out = fake_ptr<ncclLsaBarrierHandle_t>(0x15a00016);
#if SYMCOMM_TEST_NCCL_GIN_BARRIER
  ncclGinBarrierHandle_t* gin_out = fake_ptr<ncclGinBarrierHandle_t>(0x91400017);
#endif
  ncclLLA2AHandle_t* a2a_out = fake_ptr<ncclLLA2AHandle_t>(0xa2a00018);
  ncclDevResourceRequirements_t* req_out = fake_ptr<ncclDevResourceRequirements_t>(0x4e900019);
  cudaStream_t stream = fake_ptr<CUstream_st>(0x57e0001a);
  ncclTeam_t team = {5, 2, 3};
  ncclUniqueId id;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;

  Values(const Values&) = delete;
  Values& operator=(const Values&) = delete;
  Values() {
    for (size_t i = 0; i < sizeof id.internal; ++i) id.internal[i] = static_cast<char>(i * 7 + 1);
    config.blocking = 0;
    config.minCTAs = 3;
    config.maxCTAs = 17;
    config.netName = "symcomm-test-net";
    config.commName = "symcomm-test-comm";
    config.splitShare = 1;
  }
};

// The result codes the mock returns in turn: success, the non-blocking in-progress and errors.
constexpr ncclResult_t kResults[] = {ncclSuccess, ncclInProgress, ncclInvalidArgument, ncclRemoteError,
                                     ncclSystemError};

// Calls nccl<name> and pnccl<name> of `shim` through `invoke` once per result code of kResults and checks that
// each call reached the mock as exactly one call of pnccl<name> with the bytes of `expected_args` (a tuple) and
// returned the mock's result.
template <class Fn, class Invoke, class Tuple>
void expect_forwarded(const DropIn& shim, Mock& mock, const std::string& name, Invoke invoke,
                      const Tuple& expected_args) {
  const Call expected = std::apply([&](const auto&... a) { return make_call("pnccl" + name, a...); }, expected_args);
  for (const std::string prefix : {"nccl", "pnccl"}) {
    SCOPED_TRACE(prefix + name);
    const Fn f = shim.fn<Fn>(prefix + name);
    for (ncclResult_t result : kResults) {
      mock.reset(result);
      EXPECT_EQ(invoke(f), result);
      EXPECT_EQ(mock.take(), std::vector<Call>{expected});
    }
  }
}

#define SYMCOMM_FORWARDED(Fn, Name, Args, ...)         \
  expect_forwarded<Fn>(                                \
      shim, mock, #Name, [&](Fn f) { return f Args; }, \
      std::tuple_cat(std::make_tuple Args __VA_OPT__(, std::make_tuple(__VA_ARGS__))))
// A function that nccl.h declares under both names.
#define EXPECT_FORWARDED(Name, Args, ...) SYMCOMM_FORWARDED(decltype(&::pnccl##Name), Name, Args, __VA_ARGS__)
// ncclCommRevoke, which the nccl.h of some 2.28 releases does not declare (the CUDA 13.0 image's).
using CommRevokeFn = ncclResult_t (*)(ncclComm_t, int);
#define EXPECT_FORWARDED_REVOKE(Args) SYMCOMM_FORWARDED(CommRevokeFn, CommRevoke, Args)
// A function of nccl_device/*.h, which declare only the plain name (libnccl.so.2 exports both).
#define EXPECT_FORWARDED_DEVICE(Name, Args) SYMCOMM_FORWARDED(decltype(&::nccl##Name), Name, Args)

// Makes the first call of `shim`, which opens the real library.
bool first_call(const DropIn& shim) {
  int version = 0;
  EXPECT_EQ(shim.fn<decltype(&::ncclGetVersion)>("ncclGetVersion")(&version), ncclSuccess);
  return true;
}

// A drop-in library in `mode` forwarding to the complete mock, with its first call made (which loads the mock).
class ForwardingIn : public ::testing::Test {
 protected:
  explicit ForwardingIn(std::optional<std::string> mode) : env(drop_in_env(kMockPath, std::move(mode))) {}
  ScopedEnvSet env;
  TempDir dir;
  DropIn shim{dir / "libsymcomm_nccl.so"};
  bool called = first_call(shim);
  Mock mock{kMockPath};
  Values v;
};

// The default mode (forward).
class Forwarding : public ForwardingIn {
 protected:
  Forwarding() : ForwardingIn(std::nullopt) {}
};

TEST_F(Forwarding, EveryResultFunctionPassesItsArgumentsAndResultUnchanged) {
  EXPECT_FORWARDED(MemAlloc, (v.ptr_out, v.size));
  EXPECT_FORWARDED(MemFree, (v.buff));
  EXPECT_FORWARDED(GetVersion, (v.int_out));
  EXPECT_FORWARDED(GetUniqueId, (v.ids));
  EXPECT_FORWARDED(CommInitRankConfig, (v.comm_out, v.nranks, v.id, v.rank, &v.config), v.config);
  EXPECT_FORWARDED(CommInitRank, (v.comm_out, v.nranks, v.id, v.rank));
  EXPECT_FORWARDED(CommInitAll, (v.comm_out, v.ndev, v.devlist));
  EXPECT_FORWARDED(CommFinalize, (v.comm));
  EXPECT_FORWARDED(CommDestroy, (v.comm));
  EXPECT_FORWARDED(CommAbort, (v.comm));
  EXPECT_FORWARDED_REVOKE((v.comm, v.flags));
  EXPECT_FORWARDED(CommSplit, (v.comm, v.color, v.key, v.comm_out, &v.config), v.config);
  EXPECT_FORWARDED(CommShrink, (v.comm, v.ranks_out, v.nranks, v.comm_out, &v.config, v.flags));
  EXPECT_FORWARDED(CommInitRankScalable, (v.comm_out, v.nranks, v.rank, v.ndev, v.ids, &v.config));
  EXPECT_FORWARDED(CommGetAsyncError, (v.comm, v.result_out));
  EXPECT_FORWARDED(CommCount, (v.comm, v.int_out));
  EXPECT_FORWARDED(CommCuDevice, (v.comm, v.int_out));
  EXPECT_FORWARDED(CommUserRank, (v.comm, v.int_out));
  EXPECT_FORWARDED(CommRegister, (v.comm, v.buff, v.size, v.handle_out));
  EXPECT_FORWARDED(CommDeregister, (v.comm, v.handle));
  EXPECT_FORWARDED(CommWindowRegister, (v.comm, v.buff, v.size, v.win_out, v.flags));
  EXPECT_FORWARDED(CommWindowDeregister, (v.comm, v.win));
  EXPECT_FORWARDED(RedOpCreatePreMulSum, (v.op_out, v.scalar, v.datatype, v.residence, v.comm));
  EXPECT_FORWARDED(RedOpDestroy, (v.op, v.comm));
  EXPECT_FORWARDED(Reduce, (v.send, v.recv, v.count, v.datatype, v.op, v.root, v.comm, v.stream));
  EXPECT_FORWARDED(Bcast, (v.buff, v.count, v.datatype, v.root, v.comm, v.stream));
  EXPECT_FORWARDED(Broadcast, (v.send, v.recv, v.count, v.datatype, v.root, v.comm, v.stream));
  EXPECT_FORWARDED(AllReduce, (v.send, v.recv, v.count, v.datatype, v.op, v.comm, v.stream));
  EXPECT_FORWARDED(ReduceScatter, (v.send, v.recv, v.count, v.datatype, v.op, v.comm, v.stream));
  EXPECT_FORWARDED(AllGather, (v.send, v.recv, v.count, v.datatype, v.comm, v.stream));
  EXPECT_FORWARDED(AlltoAll, (v.send, v.recv, v.count, v.datatype, v.comm, v.stream));
  EXPECT_FORWARDED(Gather, (v.send, v.recv, v.count, v.datatype, v.root, v.comm, v.stream));
  EXPECT_FORWARDED(Scatter, (v.send, v.recv, v.count, v.datatype, v.root, v.comm, v.stream));
  EXPECT_FORWARDED(Send, (v.send, v.count, v.datatype, v.peer, v.comm, v.stream));
  EXPECT_FORWARDED(Recv, (v.recv, v.count, v.datatype, v.peer, v.comm, v.stream));
  EXPECT_FORWARDED(GroupStart, ());
  EXPECT_FORWARDED(GroupEnd, ());
  EXPECT_FORWARDED(GroupSimulateEnd, (v.sim_info));
  EXPECT_FORWARDED_DEVICE(DevCommCreate, (v.comm, v.reqs, v.dev_comm_out));
  EXPECT_FORWARDED_DEVICE(DevCommDestroy, (v.comm, v.dev_comm));
  EXPECT_FORWARDED_DEVICE(LsaBarrierCreateRequirement, (v.team, v.n_barriers, v.lsa_out, v.req_out));
#if SYMCOMM_TEST_NCCL_GIN_BARRIER
  EXPECT_FORWARDED_DEVICE(GinBarrierCreateRequirement, (v.comm, v.team, v.n_barriers, v.gin_out, v.req_out));
#endif
  EXPECT_FORWARDED_DEVICE(LLA2ACreateRequirement, (v.n_blocks, v.n_slots, v.a2a_out, v.req_out));
}

TEST_F(Forwarding, OutputsWrittenByTheRealLibraryReachTheCaller) {
  for (const std::string prefix : {"nccl", "pnccl"}) {
    SCOPED_TRACE(prefix);
    int version = 0;
    EXPECT_EQ(shim.fn<decltype(&::ncclGetVersion)>(prefix + "GetVersion")(&version), ncclSuccess);
    EXPECT_EQ(version, kMockVersion) << "ncclGetVersion gives the real library's version";
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    EXPECT_EQ(shim.fn<decltype(&::ncclGetUniqueId)>(prefix + "GetUniqueId")(&id), ncclSuccess);
    EXPECT_EQ(std::string(id.internal, sizeof id.internal),
              std::string(sizeof id.internal, symcomm::nccl_mock::kMockUniqueIdByte));
    ncclComm_t comm = nullptr;
    EXPECT_EQ(shim.fn<decltype(&::ncclCommInitRank)>(prefix + "CommInitRank")(&comm, v.nranks, v.id, v.rank),
              ncclSuccess);
    EXPECT_EQ(comm, symcomm::nccl_mock::mock_comm());
  }
}

TEST_F(Forwarding, FunctionsWithoutAResultCodePassArgumentsAndReturnValues) {
  using TeamOf = ncclTeam_t (*)(ncclComm_t);  // nccl_device/core.h overloads these names in C++
  using RankIn = int (*)(ncclComm_t, ncclTeam_t, int);
  const auto same_team = [](ncclTeam_t a, ncclTeam_t b) { return std::memcmp(&a, &b, sizeof a) == 0; };
  for (const std::string prefix : {"nccl", "pnccl"}) {
    SCOPED_TRACE(prefix);
    for (const char* name : {"TeamWorld", "TeamLsa", "TeamRail"}) {
      mock.reset(ncclSuccess);
      EXPECT_TRUE(same_team(shim.fn<TeamOf>(prefix + name)(v.comm), kMockTeam)) << name;
      EXPECT_EQ(mock.take(), std::vector<Call>{make_call(std::string("pnccl") + name, v.comm)});
    }
    for (const char* name : {"TeamRankToWorld", "TeamRankToLsa"}) {
      mock.reset(ncclSuccess);
      EXPECT_EQ(shim.fn<RankIn>(prefix + name)(v.comm, v.team, v.rank), kMockInt) << name;
      EXPECT_EQ(mock.take(), std::vector<Call>{make_call(std::string("pnccl") + name, v.comm, v.team, v.rank)});
    }
    mock.reset(ncclSuccess);
    EXPECT_EQ(shim.fn<decltype(&::ncclLLA2ACalcSlots)>(prefix + "LLA2ACalcSlots")(v.n_blocks, v.n_slots), kMockInt);
    EXPECT_EQ(mock.take(), std::vector<Call>{make_call("pncclLLA2ACalcSlots", v.n_blocks, v.n_slots)});

    shim.fn<decltype(&::ncclResetDebugInit)>(prefix + "ResetDebugInit")();
    EXPECT_EQ(mock.take(), std::vector<Call>{make_call("pncclResetDebugInit")});
  }
  // libnccl.so.2's pncclResetDebugInit calls this one through the dynamic linker; it has no p-name.
  shim.fn<void (*)()>("ncclResetDebugInitInternal")();
  EXPECT_EQ(mock.take(), std::vector<Call>{make_call("ncclResetDebugInitInternal")});
}

TEST_F(Forwarding, ErrorStringAndLastErrorComeFromTheRealLibrary) {
  for (const std::string prefix : {"nccl", "pnccl"}) {
    SCOPED_TRACE(prefix);
    const auto error_string = shim.fn<decltype(&::ncclGetErrorString)>(prefix + "GetErrorString");
    for (int r = 0; r <= ncclNumResults; ++r) {
      const auto result = static_cast<ncclResult_t>(r);
      mock.reset(ncclSuccess);
      EXPECT_EQ(error_string(result), mock.error_string(result)) << r;
      EXPECT_EQ(mock.take(), std::vector<Call>{make_call("pncclGetErrorString", result)});
    }
    mock.reset(ncclSuccess);
    EXPECT_STREQ(shim.fn<decltype(&::ncclGetLastError)>(prefix + "GetLastError")(v.comm),
                 symcomm::nccl_mock::kMockLastError);
    EXPECT_EQ(mock.take(), std::vector<Call>{make_call("pncclGetLastError", v.comm)});
  }
}

// NCCL's groups are per thread: the drop-in library must keep no state of its own across threads. Thread 1 runs
// a whole group while thread 0 is inside one, each with its own result code; each thread's calls and results
// come back as its own. Both threads' first calls race to open the real library.
#if SYMCOMM_NCCL_SHIM_HAS_NATIVE
// In auto mode, calls on communicators that symcomm does not serve (here the mock's, made without a stamped
// id) reach the real library exactly as in forward mode; an id whose stamp bytes NCCL filled stays NCCL's.
class ForwardingAuto : public ForwardingIn {
 protected:
  ForwardingAuto() : ForwardingIn("auto") {}
};

TEST_F(ForwardingAuto, CallsOnCommunicatorsSymcommDoesNotServePassUnchanged) {
  EXPECT_FORWARDED(GetUniqueId, (v.ids));
  EXPECT_FORWARDED(CommFinalize, (v.comm));
  EXPECT_FORWARDED(CommDestroy, (v.comm));
  EXPECT_FORWARDED(CommAbort, (v.comm));
  EXPECT_FORWARDED_REVOKE((v.comm, v.flags));
  EXPECT_FORWARDED(CommGetAsyncError, (v.comm, v.result_out));
  EXPECT_FORWARDED(Bcast, (v.buff, v.count, v.datatype, v.root, v.comm, v.stream));
  EXPECT_FORWARDED(Broadcast, (v.send, v.recv, v.count, v.datatype, v.root, v.comm, v.stream));
  EXPECT_FORWARDED(AllReduce, (v.send, v.recv, v.count, v.datatype, v.op, v.comm, v.stream));
  EXPECT_FORWARDED(ReduceScatter, (v.send, v.recv, v.count, v.datatype, v.op, v.comm, v.stream));
  EXPECT_FORWARDED(AllGather, (v.send, v.recv, v.count, v.datatype, v.comm, v.stream));
  EXPECT_FORWARDED(Reduce, (v.send, v.recv, v.count, v.datatype, v.op, v.root, v.comm, v.stream));
  EXPECT_FORWARDED(GroupStart, ());
  EXPECT_FORWARDED(GroupEnd, ());
}

// An id whose last bytes NCCL left zero comes back with the stamp (NOTE [id stamp]): NCCL's bytes unchanged, this
// host's identity, and the loopback port of a store server listening in this process; every id of the process
// names the same server and token and a nonce of its own. (The test links nothing of libsymcomm, which would
// load the real libnccl.so.2 into it and answer the tests above that open "libnccl.so.2" by name.)
TEST_F(ForwardingAuto, AnIdWithAZeroTailIsStampedWithTheProcesssStoreServer) {
  void* mock_handle = dlopen(kMockPath, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  ASSERT_NE(mock_handle, nullptr);
  const auto set_id_bytes =
      reinterpret_cast<decltype(&symcomm_nccl_mock_set_id_bytes)>(dlsym(mock_handle, "symcomm_nccl_mock_set_id_bytes"));
  ASSERT_NE(set_id_bytes, nullptr);
  set_id_bytes(40);
  const auto get_id = shim.fn<decltype(&::ncclGetUniqueId)>("ncclGetUniqueId");
  ncclUniqueId ids[2];
  for (ncclUniqueId& id : ids) {
    std::memset(&id, 0x77, sizeof id);
    ASSERT_EQ(get_id(&id), ncclSuccess);
    EXPECT_EQ(std::string(id.internal, 40), std::string(40, symcomm::nccl_mock::kMockUniqueIdByte));
  }
  dlclose(mock_handle);
  const auto a = symcomm::nccl_shim::read_stamp(ids[0]);
  const auto b = symcomm::nccl_shim::read_stamp(ids[1]);
  ASSERT_TRUE(a.has_value());
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(a->host, symcomm::nccl_shim::host_identity());
  EXPECT_EQ(a->port, b->port);
  EXPECT_EQ(a->token, b->token);
  EXPECT_NE(a->nonce, b->nonce);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(a->port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
  ::close(fd);
}
#endif

TEST(NcclDropIn, TwoThreadsKeepTheirCallsAndResultsApart) {
  const auto env = drop_in_env(kMockPath);
  TempDir dir;
  DropIn shim(dir / "libsymcomm_nccl.so");
  const auto get_version = shim.fn<decltype(&::ncclGetVersion)>("ncclGetVersion");
  const auto group_start = shim.fn<decltype(&::ncclGroupStart)>("ncclGroupStart");
  const auto group_end = shim.fn<decltype(&::ncclGroupEnd)>("ncclGroupEnd");
  const auto all_reduce = shim.fn<decltype(&::ncclAllReduce)>("ncclAllReduce");
  const Values v;
  const ncclResult_t kThreadResult[2] = {ncclInProgress, ncclRemoteError};
  const ncclComm_t kThreadComm[2] = {fake_ptr<ncclComm>(0xa000), fake_ptr<ncclComm>(0xb000)};

  struct Seen {
    int version = 0;
    ncclResult_t first = ncclNumResults;
    std::vector<ncclResult_t> results;
    std::vector<Call> calls;
    std::string error;
  };
  Seen seen[2];
  std::latch start(2), thread0_in_group(1), thread1_done(1);
  const auto run = [&](int t) {
    try {
      start.arrive_and_wait();
      seen[t].first = get_version(&seen[t].version);
      Mock mock(kMockPath);
      mock.reset(kThreadResult[t]);
      if (t == 1) thread0_in_group.wait();
      seen[t].results.push_back(group_start());
      if (t == 0) {
        thread0_in_group.count_down();
        thread1_done.wait();
      }
      seen[t].results.push_back(all_reduce(v.send, v.recv, v.count, v.datatype, v.op, kThreadComm[t], v.stream));
      seen[t].results.push_back(group_end());
      seen[t].calls = mock.take();
    } catch (const std::exception& e) {
      seen[t].error = e.what();
    }
    if (t == 1) thread1_done.count_down();
    if (t == 0 && !seen[t].error.empty()) thread0_in_group.count_down();
  };
  std::thread t0(run, 0), t1(run, 1);
  t0.join();
  t1.join();
  for (int t = 0; t < 2; ++t) {
    SCOPED_TRACE(t);
    EXPECT_EQ(seen[t].error, "");
    EXPECT_EQ(seen[t].first, ncclSuccess);
    EXPECT_EQ(seen[t].version, kMockVersion);
    EXPECT_EQ(seen[t].results, std::vector<ncclResult_t>(3, kThreadResult[t]));
    EXPECT_EQ(seen[t].calls, (std::vector<Call>{make_call("pncclGroupStart"),
                                                make_call("pncclAllReduce", v.send, v.recv, v.count, v.datatype, v.op,
                                                          kThreadComm[t], v.stream),
                                                make_call("pncclGroupEnd")}));
  }
}

// Every kind of function of a drop-in library that cannot forward returns at once (no recursion) with `code`,
// or its stated value where it has no result code, and ncclGetLastError says why (`why` is part of the text).
void expect_refused(const DropIn& shim, ncclResult_t code, const std::string& why) {
  for (const std::string prefix : {"nccl", "pnccl"}) {
    SCOPED_TRACE(prefix);
    int version = -5;
    EXPECT_EQ(shim.fn<decltype(&::ncclGetVersion)>(prefix + "GetVersion")(&version), code);
    EXPECT_EQ(version, -5);
    EXPECT_EQ(shim.fn<decltype(&::ncclGroupStart)>(prefix + "GroupStart")(), code);
    const Values v;
    EXPECT_EQ(shim.fn<decltype(&::ncclAllReduce)>(prefix + "AllReduce")(v.send, v.recv, v.count, v.datatype, v.op,
                                                                        v.comm, v.stream),
              code);
    const ncclTeam_t team = shim.fn<ncclTeam_t (*)(ncclComm_t)>(prefix + "TeamWorld")(v.comm);
    EXPECT_EQ(team.nRanks, 0);
    EXPECT_EQ(shim.fn<int (*)(ncclComm_t, ncclTeam_t, int)>(prefix + "TeamRankToWorld")(v.comm, v.team, 1), -1);
    EXPECT_EQ(shim.fn<decltype(&::ncclLLA2ACalcSlots)>(prefix + "LLA2ACalcSlots")(4, 8), -1);
    shim.fn<decltype(&::ncclResetDebugInit)>(prefix + "ResetDebugInit")();
    EXPECT_STREQ(shim.fn<decltype(&::ncclGetErrorString)>(prefix + "GetErrorString")(ncclInvalidUsage),
                 "invalid usage");
    const std::string last = shim.fn<decltype(&::ncclGetLastError)>(prefix + "GetLastError")(nullptr);
    EXPECT_NE(last.find("symcomm NCCL drop-in"), std::string::npos) << last;
    EXPECT_NE(last.find(why), std::string::npos) << last;
  }
  shim.fn<void (*)()>("ncclResetDebugInitInternal")();
}

TEST(NcclDropIn, ItselfAsTheRealLibraryIsRefused) {
  TempDir dir;
  const fs::path self = dir / "libsymcomm_nccl.so";
  const auto env = drop_in_env(self.string());
  DropIn shim(self);
  expect_refused(shim, ncclInvalidUsage, "SYMCOMM_NCCL_REAL_LIBRARY=" + self.string());
  expect_refused(shim, ncclInvalidUsage, "a symcomm NCCL drop-in library (this one or a copy), not NCCL");
}

// Another copy would take this one for the real NCCL in turn (NOTE [drop-in note]).
TEST(NcclDropIn, ACopyOfItselfAsTheRealLibraryIsRefused) {
  const auto env = drop_in_env(kDropInPath);
  TempDir dir;
  DropIn shim(dir / "libsymcomm_nccl.so");
  expect_refused(shim, ncclInvalidUsage, "a symcomm NCCL drop-in library (this one or a copy), not NCCL");
}

// The dynamic loader answers a bare libnccl.so.2 with the library loaded under that name: a drop-in library.
TEST(NcclDropIn, TheBareNcclNameAsTheRealLibraryIsRefused) {
  const auto env = drop_in_env("libnccl.so.2");
  TempDir dir;
  DropIn shim(dir / "libsymcomm_nccl.so");
  expect_refused(shim, ncclInvalidUsage, "a symcomm NCCL drop-in library (this one or a copy), not NCCL");
}

TEST(NcclDropIn, AMissingRealLibraryIsASystemError) {
  const std::string missing = "/nonexistent/symcomm-test/libnccl.so.2";
  const auto env = drop_in_env(missing);
  TempDir dir;
  DropIn shim(dir / "libsymcomm_nccl.so");
  expect_refused(shim, ncclSystemError, "SYMCOMM_NCCL_REAL_LIBRARY=" + missing);
}

TEST(NcclDropIn, ALibraryThatIsNotNcclIsASystemError) {
  const auto env = drop_in_env("libm.so.6");
  TempDir dir;
  DropIn shim(dir / "libsymcomm_nccl.so");
  expect_refused(shim, ncclSystemError, "exports no ncclGetVersion: not an NCCL library");
}

#if SYMCOMM_NCCL_SHIM_HAS_NATIVE
TEST(NcclDropIn, NativeModesAreAcceptedAndAnUnknownModeIsRefused) {
  for (const char* mode : {"auto", "native-only"}) {
    SCOPED_TRACE(mode);
    const auto env = drop_in_env(kMockPath, mode);
    TempDir dir;
    DropIn shim(dir / "libsymcomm_nccl.so");
    first_call(shim);
  }
#else
TEST(NcclDropIn, ModesThisBuildLacksAreRefusedAtTheFirstCall) {
  for (const char* mode : {"auto", "native-only"}) {
    SCOPED_TRACE(mode);
    const auto env = drop_in_env(kMockPath, mode);
    TempDir dir;
    DropIn shim(dir / "libsymcomm_nccl.so");
    expect_refused(shim, ncclInvalidUsage, std::string("SYMCOMM_NCCL_SHIM=") + mode + " is not available");
  }
#endif
  const auto env = drop_in_env(kMockPath, "native");
  TempDir dir;
  DropIn shim(dir / "libsymcomm_nccl.so");
  expect_refused(shim, ncclInvalidUsage, "SYMCOMM_NCCL_SHIM='native' is not one of forward|auto|native-only");
}

TEST(NcclDropIn, ASizeLimitThatIsNotANumberIsRefused) {
  for (const char* value : {"abc", "12x", "-1", ""}) {
    SCOPED_TRACE(value);
    const auto env = drop_in_env(kMockPath);
    ScopedEnvSet limit({{"SYMCOMM_NCCL_SHIM_ALL_GATHER_MAX_BYTES", std::string(value)}});
    TempDir dir;
    DropIn shim(dir / "libsymcomm_nccl.so");
    if (*value == '\0') {  // set but empty: unset
      first_call(shim);
    } else {
      expect_refused(shim, ncclInvalidUsage, "SYMCOMM_NCCL_SHIM_ALL_GATHER_MAX_BYTES is not a number of bytes");
    }
  }
}

TEST(NcclDropIn, AFakeNodeSizeThatIsNotAWholeNumberIsRefused) {
  const std::pair<const char*, bool> cases[] = {{"two", false}, {"-2", false}, {"1.5", false},
                                                {"max", false}, {"4", true},   {"0", true}};
  for (const auto& [value, accepted] : cases) {
    SCOPED_TRACE(value);
    const auto env = drop_in_env(kMockPath);
    ScopedEnvSet size({{"SYMCOMM_FAKE_NODE_SIZE", std::string(value)}});
    TempDir dir;
    DropIn shim(dir / "libsymcomm_nccl.so");
    if (accepted) {
      first_call(shim);
    } else {
      expect_refused(shim, ncclInvalidUsage, "SYMCOMM_FAKE_NODE_SIZE is not a whole number of ranks");
    }
  }
}

TEST(NcclDropIn, ForwardIsTheDefaultMode) {
  for (const char* mode : {"forward", ""}) {
    SCOPED_TRACE(mode);
    const auto env = drop_in_env(kMockPath, mode);
    TempDir dir;
    DropIn shim(dir / "libsymcomm_nccl.so");
    int version = 0;
    EXPECT_EQ(shim.fn<decltype(&::ncclGetVersion)>("ncclGetVersion")(&version), ncclSuccess);
    EXPECT_EQ(version, kMockVersion);
  }
}

// Without SYMCOMM_NCCL_REAL_LIBRARY the library looks in LD_LIBRARY_PATH's directories first. Here it finds
// itself (a/libnccl.so.2), then another copy (b/), then the mock under NCCL's name (c/): it skips both drop-in
// libraries and takes the mock. Taking the copy would send every call back and forth between the two copies.
TEST(NcclDropIn, TheSearchSkipsDropInLibrariesAndTakesTheFirstNccl) {
  TempDir a, b, c;
  fs::copy_file(kDropInPath, b / "libnccl.so.2");
  fs::create_symlink(kMockPath, c / "libnccl.so.2");
  const auto env =
      drop_in_env(std::nullopt, std::nullopt, a.path().string() + "::" + b.path().string() + ":" + c.path().string());
  DropIn shim(a / "libnccl.so.2");
  int version = 0;
  EXPECT_EQ(shim.fn<decltype(&::ncclGetVersion)>("ncclGetVersion")(&version), ncclSuccess);
  EXPECT_EQ(version, kMockVersion);
  Mock mock(kMockPath);
  mock.reset(ncclInProgress);
  const Values v;
  EXPECT_EQ(
      shim.fn<decltype(&::ncclAllReduce)>("ncclAllReduce")(v.send, v.recv, v.count, v.datatype, v.op, v.comm, v.stream),
      ncclInProgress);
  EXPECT_EQ(mock.take(), std::vector<Call>{
                             make_call("pncclAllReduce", v.send, v.recv, v.count, v.datatype, v.op, v.comm, v.stream)});
}

// The partial mock lacks ncclCommShrink and has ncclAllReduce under its plain name only.
TEST(NcclDropIn, AFunctionTheRealLibraryLacksIsASystemErrorNamingIt) {
  const auto env = drop_in_env(kPartialMockPath);
  TempDir dir;
  DropIn shim(dir / "libsymcomm_nccl.so");
  const auto last_error = shim.fn<decltype(&::ncclGetLastError)>("ncclGetLastError");
  const Values v;
  int version = 0;
  ASSERT_EQ(shim.fn<decltype(&::ncclGetVersion)>("ncclGetVersion")(&version), ncclSuccess);
  Mock mock(kPartialMockPath);
  mock.reset(ncclSuccess);

  const auto shrink = shim.fn<decltype(&::ncclCommShrink)>("ncclCommShrink");
  for (int i = 0; i < 2; ++i) {  // the second call finds the function missing as resolved
    ncclComm_t out = nullptr;
    EXPECT_EQ(shrink(v.comm, v.ranks_out, 2, &out, nullptr, 0), ncclSystemError);
    EXPECT_EQ(out, nullptr);
    const std::string text = last_error(v.comm);
    EXPECT_NE(text.find("has no function pncclCommShrink or ncclCommShrink"), std::string::npos) << text;
    EXPECT_NE(text.find(kPartialMockPath), std::string::npos) << text;
  }
  EXPECT_EQ(mock.take(), std::vector<Call>{}) << "ncclGetLastError answered for the failure itself";

  // Asking for the error string, or a call that succeeds, leaves the last error as it was.
  EXPECT_EQ(shim.fn<decltype(&::ncclGetErrorString)>("ncclGetErrorString")(ncclSystemError),
            mock.error_string(ncclSystemError));
  EXPECT_EQ(shim.fn<decltype(&::ncclGroupStart)>("ncclGroupStart")(), ncclSuccess);
  EXPECT_NE(std::string(last_error(v.comm)).find("pncclCommShrink"), std::string::npos);

  // The plain name stands in for a missing p-name.
  mock.reset(ncclInternalError);
  EXPECT_EQ(shim.fn<decltype(&::pncclAllReduce)>("pncclAllReduce")(v.send, v.recv, v.count, v.datatype, v.op, v.comm,
                                                                   v.stream),
            ncclInternalError);
  EXPECT_EQ(mock.take(),
            std::vector<Call>{make_call("ncclAllReduce", v.send, v.recv, v.count, v.datatype, v.op, v.comm, v.stream)});
  // That call failed in the real library: its last error is the real library's.
  EXPECT_STREQ(last_error(v.comm), symcomm::nccl_mock::kMockLastError);
}

}  // namespace
