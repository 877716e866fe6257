#pragma once
// Multi-process rank harness (in the spirit of Gloo's spawn()): runs a test body in N forked processes, each
// a rank with its own store connection, and reports every rank's fate to the parent test.
//
// The parent must not have initialised CUDA (fork after CUDA init is undefined): count GPUs with
// count_gpus_in_child(). Inside the body, GoogleTest assertions work as usual; a failed assertion, an
// exception or a crash makes that rank exit non-zero, and run_ranks() reports it to the parent's test.

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "symcomm/communicator.h"

namespace symcomm::testing {

struct RankEnv {
  RankInfo info;
  Config config;                 ///< test defaults: 3 s timeout (NOTE [test timeout scale]), small heap
  std::shared_ptr<Store> store;  ///< connected to the job's store (hosted by rank 0's process)
  /// Names this job apart from every other on the host while it runs (the test process and the store's port):
  /// a token for what the ranks name on the host themselves, such as peer-mesh sockets, so that jobs run at
  /// the same time never meet.
  std::string job_id;
  /// Creates a communicator over `store` with options.config defaulting to `config`.
  std::unique_ptr<Communicator> make_comm(CommOptions options = {});
};

struct RankOutcome {
  int rank = 0;
  bool exited = false;  ///< normal exit (then exit_code is valid)
  int exit_code = -1;
  int signal = 0;  ///< killing signal if !exited
  bool timed_out = false;
  int pid = 0;  ///< the rank's process id
  /// Everything the rank wrote to stderr (its whole life, after the fork), with HarnessOptions::capture_stderr.
  std::string stderr_text;
};

/// NOTE [test timeout scale] SYMCOMM_TEST_TIMEOUT_SCALE=k (an integer, default 1) multiplies the default
/// communicator deadline and the whole-job limit, for runs under compute-sanitizer or other slow tools, where
/// host waits that normally take milliseconds take seconds. Deadlines a test sets itself are not scaled.
int timeout_scale();

struct HarnessOptions {
  std::chrono::milliseconds timeout{std::chrono::seconds(120) *
                                    timeout_scale()};  ///< whole job; stragglers are SIGKILLed
  Config config = default_test_config();
  /// Ranks expected to die or fail (their outcome is not checked by expect_success()).
  std::vector<int> may_fail;
  /// Each rank's stderr goes to RankOutcome::stderr_text instead of the test's stderr (expect_success() shows
  /// a failed rank's text in its failure message).
  bool capture_stderr = false;

  static Config default_test_config();
};

/// Forks `world_size` ranks; rank 0 hosts the store. Returns when all have ended (or the timeout hit).
/// Where options.config.trace_dir is empty, the ranks' config names a directory made for the job and removed
/// with what it holds when the job has ended, so that the operation records written on the ranks' fatal errors
/// stay out of the temporary directory.
std::vector<RankOutcome> run_ranks(int world_size, const std::function<void(RankEnv&)>& body,
                                   const HarnessOptions& options = {});

/// run_ranks() + ADD_FAILURE() for every rank (except options.may_fail) that did not exit 0.
std::vector<RankOutcome> expect_success(int world_size, const std::function<void(RankEnv&)>& body,
                                        const HarnessOptions& options = {});

/// Every rank adds itself to `key`, then waits until all `world_size` ranks have: a barrier outside any
/// communicator (e.g. so that no rank exits, or destroys a communicator, before the others have counted).
void store_barrier(Store& store, const std::string& key, int world_size);

/// No rank leaves (destroying its communicator, which its peers would see as a departure) before every rank for
/// which `checked(rank)` holds has checked its error: those say so under `key` in env's store, and every rank waits
/// for them.
void wait_until_checked(RankEnv& env, const std::string& key, const std::function<bool(int)>& checked);

/// Number of CUDA devices, counted in a forked child so that this process never initialises CUDA.
int count_gpus_in_child();
/// World size of the GPU tests: the number of CUDA devices (count_gpus_in_child()), or, where ranks may share
/// GPUs (SYMCOMM_SHARED_GPU=1, Config::shared_gpu), SYMCOMM_TEST_WORLD ranks if set, on at least one GPU.
int gpu_test_world();

/// Deterministic pseudo-random generator for test inputs (splitmix64).
uint64_t mix64(uint64_t x);

}  // namespace symcomm::testing
