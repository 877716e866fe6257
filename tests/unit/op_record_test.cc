// The operation record of a communicator's first fatal error (NOTE [op record] in src/backends/comm_context.cc):
// the short form the log gets (compact_record, a pure function of the history) and the file with every record
// that CommContext::set_sticky writes, or says it could not write.

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "base/logging.h"
#include "base/op_history.h"
#include "harness/process_counts.h"

namespace symcomm::detail {
namespace {

OpRecord op(uint64_t seq, OpState state) {
  return OpRecord{.seq = seq,
                  .kind = Collective::kAllReduce,
                  .dtype = DataType::kFloat32,
                  .op = ReduceOp::kSum,
                  .count = 1024,
                  .algo = Algorithm::kOneShot,
                  .state = state};
}

// Records first..last, done except where `states` says otherwise.
std::vector<OpRecord> ops(uint64_t first, uint64_t last, std::vector<std::pair<uint64_t, OpState>> states = {}) {
  std::vector<OpRecord> out;
  for (uint64_t s = first; s <= last; ++s) {
    OpState state = OpState::kDone;
    for (const auto& [seq, st] : states) {
      if (seq == s) state = st;
    }
    out.push_back(op(s, state));
  }
  return out;
}

using Lines = std::vector<std::string>;

TEST(CompactRecord, TheFailedOpTheThreeBeforeItAndTheRestCounted) {
  EXPECT_EQ(compact_record(ops(38, 101, {{101, OpState::kFailed}})),
            (Lines{"ops 38-97: 60 done", "op 98 all_reduce dtype=float32 op=sum count=1024 algo=one_shot done",
                   "op 99 all_reduce dtype=float32 op=sum count=1024 algo=one_shot done",
                   "op 100 all_reduce dtype=float32 op=sum count=1024 algo=one_shot done",
                   "op 101 all_reduce dtype=float32 op=sum count=1024 algo=one_shot failed"}));
}

// The first record not done is where the error was found; the records after it (asynchronous collectives,
// a group's members) are counted by state, in the order issued, running, done, failed.
TEST(CompactRecord, TheFirstOpNotDoneAndTheLaterOnesCountedByState) {
  const auto in = ops(1, 10,
                      {{6, OpState::kRunning},
                       {7, OpState::kFailed},
                       {8, OpState::kIssued},
                       {9, OpState::kIssued},
                       {10, OpState::kRunning}});
  EXPECT_EQ(compact_record(in),
            (Lines{"ops 1-2: 2 done", "op 3 all_reduce dtype=float32 op=sum count=1024 algo=one_shot done",
                   "op 4 all_reduce dtype=float32 op=sum count=1024 algo=one_shot done",
                   "op 5 all_reduce dtype=float32 op=sum count=1024 algo=one_shot done",
                   "op 6 all_reduce dtype=float32 op=sum count=1024 algo=one_shot running",
                   "ops 7-10: 2 issued, 1 running, 1 failed"}));
}

TEST(CompactRecord, AllDoneShowsTheLastOps) {
  EXPECT_EQ(compact_record(ops(1, 6)),
            (Lines{"ops 1-2: 2 done", "op 3 all_reduce dtype=float32 op=sum count=1024 algo=one_shot done",
                   "op 4 all_reduce dtype=float32 op=sum count=1024 algo=one_shot done",
                   "op 5 all_reduce dtype=float32 op=sum count=1024 algo=one_shot done",
                   "op 6 all_reduce dtype=float32 op=sum count=1024 algo=one_shot done"}));
}

TEST(CompactRecord, ShortHistoriesSingleOpsAndOtherWindows) {
  EXPECT_EQ(compact_record({}), Lines{});
  EXPECT_EQ(compact_record(ops(1, 1)), Lines{"op 1 all_reduce dtype=float32 op=sum count=1024 algo=one_shot done"});
  EXPECT_EQ(compact_record(ops(1, 2, {{1, OpState::kRunning}, {2, OpState::kIssued}})),
            (Lines{"op 1 all_reduce dtype=float32 op=sum count=1024 algo=one_shot running", "op 2: 1 issued"}));
  EXPECT_EQ(compact_record(ops(4, 6, {{4, OpState::kFailed}}), 0),
            (Lines{"op 4 all_reduce dtype=float32 op=sum count=1024 algo=one_shot failed", "ops 5-6: 2 done"}));
  EXPECT_EQ(compact_record(ops(1, 3), 0),
            (Lines{"ops 1-2: 2 done", "op 3 all_reduce dtype=float32 op=sum count=1024 algo=one_shot done"}));
  EXPECT_EQ(compact_record(ops(1, 5, {{5, OpState::kIssued}}), 3).size(), 5u);  // one counted, three, the focus
}

// From a ring that dropped its oldest records, with every field of a record in its line.
TEST(CompactRecord, FromAHistoryThatKeepsTheLastSixtyFour) {
  OpHistory h(64);
  for (int i = 0; i < 100; ++i) {
    h.set_state(h.record(OpRecord{.kind = Collective::kBarrier}), OpState::kDone);
  }
  h.set_state(h.record(OpRecord{.kind = Collective::kAllGather,
                                .dtype = DataType::kBFloat16,
                                .op = ReduceOp::kMax,
                                .count = 7,
                                .algo = Algorithm::kCopyEngine}),
              OpState::kRunning);
  EXPECT_EQ(compact_record(h.snapshot()),
            (Lines{"ops 38-97: 60 done", "op 98 barrier dtype=float32 op=sum count=0 algo=auto done",
                   "op 99 barrier dtype=float32 op=sum count=0 algo=auto done",
                   "op 100 barrier dtype=float32 op=sum count=0 algo=auto done",
                   "op 101 all_gather dtype=bfloat16 op=max count=7 algo=copy_engine running"}));
}

// stderr of this process into a memory file while it lives; text() gives back what was written.
class StderrCapture {
 public:
  StderrCapture() : file_(::memfd_create("stderr", MFD_CLOEXEC)), saved_(::dup(STDERR_FILENO)) {
    EXPECT_GE(file_, 0);
    EXPECT_GE(saved_, 0);
    ::dup2(file_, STDERR_FILENO);
  }
  ~StderrCapture() {
    ::dup2(saved_, STDERR_FILENO);
    ::close(saved_);
    ::close(file_);
  }
  std::string text() const {
    std::string out(static_cast<size_t>(::lseek(file_, 0, SEEK_END)), '\0');
    EXPECT_EQ(::pread(file_, out.data(), out.size(), 0), static_cast<ssize_t>(out.size()));
    return out;
  }

 private:
  int file_, saved_;
};

// Sets the process-wide log level for its lifetime.
class ScopedLogLevel {
 public:
  explicit ScopedLogLevel(LogLevel level) : saved_(log_level()) { set_log_level(level); }
  ~ScopedLogLevel() { set_log_level(saved_); }

 private:
  LogLevel saved_;
};

// A temporary directory removed with what it holds.
struct TempDir {
  std::string path;
  TempDir() {
    char pattern[] = "/tmp/symcomm-op-record-XXXXXX";
    EXPECT_NE(::mkdtemp(pattern), nullptr);
    path = pattern;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path)) out.push_back(e.path().filename().string());
    return out;
  }
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Rank 1 of 4 of "symcomm/unit/split0", keeping 8 of 10 operations, the last failed.
void fill(CommContext& ctx, const std::string& dir) {
  ctx.ranks = RankInfo{1, 4, 1, 4};
  ctx.prefix = "symcomm/unit/split0";
  ctx.config.trace_dir = dir;
  ctx.config.op_history = 8;
  ctx.history.set_capacity(8);
  for (int i = 0; i < 10; ++i) {
    OpRecord r = op(0, OpState::kDone);
    r.count = 100 + i;
    const uint64_t seq = ctx.history.record(r);
    if (i < 9) ctx.history.set_state(seq, OpState::kDone);
    if (i == 9) ctx.history.set_state(seq, OpState::kFailed);
  }
}

const Error kTimeoutError(ErrorCode::kTimeout, "rank 1: rank 3 did not arrive", "host_engine.cc", 7, {3});

TEST(OpRecordFile, WrittenOnceWithEveryOpAndNamedInTheShortLog) {
  TempDir dir;
  CommContext ctx;
  fill(ctx, dir.path);
  ScopedLogLevel level(LogLevel::kWarn);
  std::string log;
  int fds_before = 0, fds_after = 0;
  {
    StderrCapture capture;
    fds_before = testing::count_dir("/proc/self/fd");
    ctx.set_sticky(kTimeoutError);
    ctx.set_sticky(Error(ErrorCode::kAborted, "a later error"));  // not the first: neither logged nor written
    fds_after = testing::count_dir("/proc/self/fd");
    log = capture.text();
  }
  EXPECT_EQ(fds_after, fds_before) << "the file's fd is closed";
  const std::string name = fmt::format("symcomm-trace-unit_split0-rank1-pid{}.txt", ::getpid());
  ASSERT_EQ(dir.files(), std::vector<std::string>{name});
  const std::string path = dir.path + "/" + name;
  EXPECT_EQ(count_of(log, "\n"), 7u) << log;  // error, file, one count, four ops
  EXPECT_EQ(count_of(log, kTimeoutError.what()), 1u) << log;
  EXPECT_EQ(count_of(log, "a later error"), 0u) << log;
  EXPECT_NE(log.find("  last operations of symcomm/unit/split0 (full record: " + path + "):\n"), std::string::npos)
      << log;
  EXPECT_NE(log.find("  ops 3-6: 4 done\n"), std::string::npos) << log;
  EXPECT_NE(log.find("  op 10 all_reduce dtype=float32 op=sum count=109 algo=one_shot failed\n"), std::string::npos)
      << log;

  const std::string file = read_file(path);
  std::string want =
      fmt::format("symcomm operation record\ncommunicator: symcomm/unit/split0\nrank: 1 of 4\npid: {}\n", ::getpid());
  EXPECT_TRUE(file.starts_with(want)) << file;
  EXPECT_NE(file.find(fmt::format("\nerror: {}\nerror code: timeout\nerror ranks: 3\n", kTimeoutError.what())),
            std::string::npos)
      << file;
  EXPECT_NE(file.find("\noperations kept: 8 (of 10 issued; SYMCOMM_OP_HISTORY=8)\n"), std::string::npos) << file;
  std::string op_lines;
  for (int seq = 3; seq <= 10; ++seq) {
    op_lines += fmt::format("  op {} all_reduce dtype=float32 op=sum count={} algo=one_shot {}\n", seq, 100 + seq - 1,
                            seq == 10 ? "failed" : "done");
  }
  EXPECT_TRUE(file.ends_with(op_lines)) << file;
  EXPECT_EQ(count_of(file, "  op "), 8u) << file;
  EXPECT_NE(file.find("\ntime: 20"), std::string::npos) << file;  // a UTC time: 20yy-mm-ddThh:mm:ss.mmmZ
}

// An existing name (a file, or a symbolic link, which is never followed) gets the next numbered name.
TEST(OpRecordFile, AnExistingNameOrLinkIsLeftAloneAndANumberedNameUsed) {
  TempDir dir;
  const std::string stem = fmt::format("{}/symcomm-trace-unit_split0-rank1-pid{}", dir.path, ::getpid());
  const std::string target = dir.path + "/target";
  { std::ofstream(target) << "untouched"; }
  std::filesystem::create_symlink(target, stem + ".txt");
  { std::ofstream(stem + ".1.txt") << "earlier"; }
  CommContext ctx;
  fill(ctx, dir.path);
  ScopedLogLevel level(LogLevel::kError);
  std::string log;
  {
    StderrCapture capture;
    ctx.set_sticky(kTimeoutError);
    log = capture.text();
  }
  EXPECT_NE(log.find("(full record: " + stem + ".2.txt):"), std::string::npos) << log;
  EXPECT_EQ(read_file(target), "untouched");
  EXPECT_EQ(read_file(stem + ".1.txt"), "earlier");
  EXPECT_EQ(count_of(read_file(stem + ".2.txt"), "  op "), 8u);
}

// A directory that cannot take the file: the log line says so, and the short record is still logged.
TEST(OpRecordFile, AFileThatCannotBeWrittenIsSaidInTheLog) {
  TempDir dir;
  CommContext ctx;
  fill(ctx, dir.path + "/missing");
  ScopedLogLevel level(LogLevel::kWarn);
  std::string log;
  int fds_before = 0, fds_after = 0;
  {
    StderrCapture capture;
    fds_before = testing::count_dir("/proc/self/fd");
    ctx.set_sticky(kTimeoutError);
    fds_after = testing::count_dir("/proc/self/fd");
    log = capture.text();
  }
  EXPECT_EQ(fds_after, fds_before);
  EXPECT_NE(log.find(fmt::format("  last operations of symcomm/unit/split0 (the full record was not written: cannot "
                                 "create {}/missing/symcomm-trace-unit_split0-rank1-pid{}.txt: No such file or "
                                 "directory):\n",
                                 dir.path, ::getpid())),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("  op 10 all_reduce dtype=float32 op=sum count=109 algo=one_shot failed\n"), std::string::npos)
      << log;
  EXPECT_TRUE(dir.files().empty());
}

// Logging off: nothing on stderr and no file (the error still becomes the sticky one).
TEST(OpRecordFile, NothingWhenLoggingIsOff) {
  TempDir dir;
  CommContext ctx;
  fill(ctx, dir.path);
  ScopedLogLevel level(LogLevel::kOff);
  std::string log;
  {
    StderrCapture capture;
    ctx.set_sticky(kTimeoutError);
    log = capture.text();
  }
  EXPECT_EQ(log, "");
  EXPECT_TRUE(dir.files().empty());
  ASSERT_TRUE(ctx.sticky().has_value());
  EXPECT_EQ(ctx.sticky()->code(), ErrorCode::kTimeout);
}

}  // namespace
}  // namespace symcomm::detail
