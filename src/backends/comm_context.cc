#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <ctime>
#include <string_view>
#include <system_error>

#include "backends/backend.h"
#include "base/check.h"
#include "base/logging.h"

namespace symcomm::detail {

// NOTE [op record]
// A communicator's first fatal error (dead peer, timeout, mismatch, an abort seen by a running collective) is
// logged once, with the operations that led to it, by whichever path found it (CommContext::set_sticky). The
// log gets a short form, so that the error stays readable where several ranks write to one terminal: the
// error, the first operation not done (where it was found), the three before it, counts by state of the rest
// (compact_record) and the path of a file that holds the whole record: every operation the history keeps,
// with every field, and the error, the communicator, the rank, the process id and the time. For a rank killed
// in a 4-rank host all-reduce each survivor writes 8 lines to stderr (CPU machine), the peer mesh's line naming
// the dead rank included (Faults.ARankKilledMidAllReduceLeavesAShortLogAndTheFullRecordInAFile). The file goes to
// SYMCOMM_TRACE_DIR ($TMPDIR, else /tmp), named after the communicator, the rank and the pid, created
// exclusively and never through a symbolic link (the directory may be shared); an existing name gets a
// numbered suffix. The file is written only when the error is logged (log level error or more verbose). The
// error path must go on whatever happens here: nothing is thrown out of it, and a file that cannot be
// written is said so in the log line that would have named it.
namespace {

// The communicator's name as part of a file name: "symcomm/c0" -> "c0", "symcomm/a/split1" -> "a_split1".
std::string file_part(std::string_view prefix) {
  constexpr std::string_view kLead = "symcomm/";
  if (prefix.starts_with(kLead)) prefix.remove_prefix(kLead.size());
  std::string out(prefix.substr(0, 64));
  for (char& c : out) {
    const bool keep =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
    if (!keep) c = '_';
  }
  return out.empty() ? std::string("unnamed") : out;
}

std::string errno_text(int err) { return std::generic_category().message(err); }

// Writes `text` to a new file dir/stem.txt (else dir/stem.1.txt, ...). Returns its path, or in `why` what
// went wrong.
std::string write_new_file(const std::string& dir, const std::string& stem, const std::string& text, std::string& why) {
  constexpr int kTries = 100;
  for (int k = 0; k < kTries; ++k) {
    const std::string path = k == 0 ? fmt::format("{}/{}.txt", dir, stem) : fmt::format("{}/{}.{}.txt", dir, stem, k);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
      if (errno == EEXIST) continue;
      why = fmt::format("cannot create {}: {}", path, errno_text(errno));
      return {};
    }
    size_t done = 0;
    int err = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        err = n < 0 ? errno : EIO;
        break;
      }
      done += static_cast<size_t>(n);
    }
    if (::close(fd) != 0 && err == 0 && errno != EINTR) err = errno;
    if (err != 0) {
      why = fmt::format("{} holds {} of its {} bytes: {}", path, done, text.size(), errno_text(err));
      return {};
    }
    return path;
  }
  why = fmt::format("cannot create {}/{}.txt: it and {} numbered names exist", dir, stem, kTries - 1);
  return {};
}

std::string utc_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char text[32] = {};
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &tm);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  return fmt::format("{}.{:03}Z", text, ms);
}

}  // namespace

void CommContext::set_sticky(const Error& e) {
  {
    std::lock_guard lock(mu_);
    if (sticky_) return;
    sticky_ = e;
  }
  if (log_level() < LogLevel::kError) return;  // kOff: nothing logged, no file (NOTE [op record])
  try {
    const std::vector<OpRecord> ops = history.snapshot();
    const int pid = static_cast<int>(::getpid());
    std::string full = fmt::format(
        "symcomm operation record\ncommunicator: {}\nrank: {} of {}\npid: {}\ntime: {}\nerror: {}\n"
        "error code: {}\nerror ranks: {}\noperations kept: {} (of {} issued; SYMCOMM_OP_HISTORY={})\n",
        prefix, ranks.rank, ranks.world_size, pid, utc_now(), e.what(), to_string(e.code()), fmt::join(e.ranks(), ","),
        ops.size(), ops.empty() ? 0 : ops.back().seq, config.op_history);
    for (const OpRecord& r : ops) full += "  " + format_op(r) + "\n";
    std::string why;
    const std::string path =
        write_new_file(trace_dir_of(config),
                       fmt::format("symcomm-trace-{}-rank{}-pid{}", file_part(prefix), ranks.rank, pid), full, why);
    std::string brief = fmt::format("{}\n  last operations of {} ({}):", e.what(), prefix,
                                    path.empty() ? "the full record was not written: " + why : "full record: " + path);
    for (const std::string& line : compact_record(ops)) brief += "\n  " + line;
    log_write(LogLevel::kError, brief);
  } catch (...) {
    // Out of memory while formatting: the error itself still reaches the caller, which is what matters.
  }
}

std::optional<Error> CommContext::sticky() const {
  std::lock_guard lock(mu_);
  return sticky_;
}

Error CommContext::peer_lost_error(uint64_t dead, uint64_t left, const char* file, int line) const {
  std::vector<int> ranks_lost;
  std::string what;
  const std::vector<int>* pids = mesh ? &mesh->pids() : nullptr;
  for (int r = 0; r < ranks.world_size; ++r) {
    uint64_t bit = uint64_t{1} << r;
    if (!((dead | left) & bit)) continue;
    ranks_lost.push_back(r);
    int pid = pids && r < static_cast<int>(pids->size()) ? (*pids)[r] : -1;
    what += fmt::format("{}rank {} (pid {}) {}", what.empty() ? "" : ", ", r, pid,
                        (dead & bit) ? "died (its connection closed without goodbye)" : "left the communicator");
  }
  return Error(ErrorCode::kPeerDead, fmt::format("rank {}: {}", ranks.rank, what), file, line, ranks_lost);
}

Bytes CommContext::store_get(const std::string& key, const Deadline& deadline) const {
  store->wait({key}, std::chrono::milliseconds(std::max<long long>(1, deadline.remaining_ms())));
  return store->get(key);
}

std::vector<std::vector<uint8_t>> CommContext::mesh_all_gather(uint32_t tag, const std::vector<uint8_t>& mine) {
  const int n = ranks.world_size, me = ranks.rank;
  std::vector<std::vector<uint8_t>> all(n);
  all[me] = mine;
  for (int p = 0; p < n; ++p) {
    if (p != me) mesh->send(p, tag, mine);
  }
  for (int p = 0; p < n; ++p) {
    if (p != me) all[p] = mesh->receive(p, tag, deadline(), &aborted).payload;
  }
  return all;
}

void CommContext::throw_if_failed() const {
  if (auto e = sticky()) throw *e;
  if (aborted.load(std::memory_order_acquire)) {
    SYMCOMM_THROW(kAborted, "rank {}: the communicator was aborted", ranks.rank);
  }
  // A dead peer breaks the communicator. A peer that left cleanly (destroyed its communicator) only fails
  // the operations that wait for it: a rank may still finish, or run count-0 no-ops, after a peer left.
  if (mesh) {
    if (uint64_t dead = mesh->dead_mask()) throw peer_lost_error(dead, 0, __FILE__, __LINE__);
  }
}

}  // namespace symcomm::detail
