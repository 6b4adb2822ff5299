// The timeline's file naming, STAT frame validation, and the stall inspector
// with ranks as threads (one of them late, or away past the deadline).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "engine/communicator.h"
#include "observe/stall_inspector.h"
#include "observe/timeline.h"
#include "test_util.h"
#include "transport/wire_check.h"

namespace pytfcomm {
namespace {

TEST(Timeline, PathPerRank) {
  EXPECT_EQ(Timeline::path_for("/tmp/t.json", 3), "/tmp/t.rank3.json");
  EXPECT_EQ(Timeline::path_for("/tmp/t", 3), "/tmp/t.rank3");
  EXPECT_EQ(Timeline::path_for("/tmp/a.d/t", 0), "/tmp/a.d/t.rank0");
  EXPECT_EQ(Timeline::path_for("/tmp/.t", 1), "/tmp/.t.rank1");
  EXPECT_EQ(Timeline::path_for("t-%r.json", 12), "t-12.json");
  EXPECT_EQ(Timeline::path_for("%r/t-%r.json", 2), "2/t-2.json");
}

TEST(Timeline, UnwritablePathMeansNoTimeline) {
  EXPECT_EQ(Timeline::open("/nonexistent-dir/t.json", 0, 1, "h"), nullptr);
  EXPECT_EQ(Timeline::open("", 0, 1, "h"), nullptr);
}

TEST(Timeline, OpenFileRefusesLinksAndCreatesPrivateFiles) {
  char dir_template[] = "/tmp/pytfcomm-open-file-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  const std::string victim = dir + "/victim", link = dir + "/link", fresh = dir + "/t.json";
  int v = ::open(victim.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(v, 0);
  ASSERT_EQ(::write(v, "keep", 4), 4);
  ::close(v);
  ASSERT_EQ(::symlink(victim.c_str(), link.c_str()), 0);
  std::string why;
  EXPECT_EQ(Timeline::open_file(link, &why), -1);
  EXPECT_NE(why.find("it is a symbolic link"), std::string::npos) << why;
  struct stat st;
  ASSERT_EQ(::stat(victim.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 4);  // not truncated
  const std::string hard = dir + "/hard";
  ASSERT_EQ(::link(victim.c_str(), hard.c_str()), 0);
  why.clear();
  EXPECT_EQ(Timeline::open_file(hard, &why), -1);
  EXPECT_NE(why.find("other hard links"), std::string::npos) << why;
  mode_t old_mask = ::umask(022);  // a usual one: the 0600 must come from open_file
  int fd = Timeline::open_file(fresh, &why);
  ::umask(old_mask);
  ASSERT_GE(fd, 0) << why;
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ::close(fd);
  for (const std::string& p : {victim, link, hard, fresh}) ::unlink(p.c_str());
  ::rmdir(dir.c_str());
}

TEST(CheckFrame, StatusFrames) {
  wire::FrameHeader h{};
  h.magic = wire::kStatusMagic;
  h.reserved = transport::kStatusQuery | transport::kStatusInCollective;
  EXPECT_EQ(wire::check_frame(h, {}, 0, 1 << 20), wire::FrameVerdict::kStatus);
  h.nbytes = 1;  // a status frame has no payload
  EXPECT_EQ(wire::check_frame(h, {}, 0, 1 << 20), wire::FrameVerdict::kNotAFrame);
  h.nbytes = 0;
  h.reserved = 8;  // unknown flags
  EXPECT_EQ(wire::check_frame(h, {}, 0, 1 << 20), wire::FrameVerdict::kNotAFrame);
}

// Three ranks as threads; rank 1 starts its second all-reduce late. The
// others must say so (stderr), and everyone gets the right sum.
TEST(StallInspector, NamesTheLateRank) {
  const int n = 3, port = testing_util::free_port();
  std::vector<float> results(n, 0);
  ::testing::internal::CaptureStderr();
  auto errors = testing_util::on_threads(n, [&](int r) {
    CommOptions o = testing_util::loopback_options(r, n, port);
    o.transport = "tcp";
    o.stall_warning_s = 0.3;
    o.timeout_s = 30;
    Communicator c(o);
    std::vector<float> x(1000, 1.0f), y(1000);
    c.allreduce(x.data(), y.data(), x.size(), DType::kFloat32, ReduceOp::kSum, Algorithm::kRing,
                -1);
    if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    c.allreduce(x.data(), y.data(), x.size(), DType::kFloat32, ReduceOp::kSum, Algorithm::kRing,
                -1);
    results[static_cast<size_t>(r)] = y[999];
  });
  std::string err = ::testing::internal::GetCapturedStderr();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
    EXPECT_EQ(results[static_cast<size_t>(r)], 3.0f) << "rank " << r;
  }
  // Rank 1 has not asked for the second all-reduce: the others wait for it
  // in the negotiation, and name the call they wait in.
  EXPECT_NE(err.find("stall: negotiating round"), std::string::npos) << err;
  EXPECT_NE(err.find("for 'allreduce #1 of an unnamed thread', allreduce(float32 x 1000"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("Holding it back: rank 1 ("), std::string::npos) << err;
  EXPECT_EQ(err.find("Holding it back: rank 0"), std::string::npos) << err;
  EXPECT_EQ(err.find("Holding it back: rank 2"), std::string::npos) << err;
}

// The verdict at a deadline: every rank that did not answer the last status
// query or answered from an older collective holds the collective back and
// is named, but only the silent ones are denied last words (check_deadline):
// a rank that answered reads its frames, and without the ABORT it would take
// the closed connection for a lost peer (docs/reliability.md).
TEST(StallInspector, VerdictTellsSilentRanksFromAnsweringOnes) {
  StallInspector s(/*rank=*/0, /*size=*/4, /*threshold_s=*/0);
  transport::MessageMeta meta;
  meta.seq = 5;
  const TimePoint now = Clock::now();
  // Began 0.9 s ago with a 1 s timeout: the last question is due.
  s.begin(meta, "allreduce", 4096, 1.0, now - std::chrono::milliseconds(900));
  EXPECT_FALSE(s.on_deadline(Clock::now()).asked);  // not asked yet: nothing known
  s.on_block(Clock::now());
  transport::MessageMeta older = meta, same = meta;
  older.seq = 4;
  s.on_status(1, older, 0);                              // answered, idle after an older collective
  s.on_status(3, same, transport::kStatusInCollective);  // waiting like us
  // rank 2 does not answer
  transport::StallVerdict v = s.on_deadline(Clock::now());
  EXPECT_TRUE(v.asked);
  EXPECT_EQ(v.culprits, (std::vector<int>{1, 2}));
  EXPECT_EQ(v.silent, (std::vector<int>{2}));
  EXPECT_NE(v.text.find("rank 1 is still in"), std::string::npos) << v.text;
  EXPECT_NE(v.text.find("rank 2 has not joined"), std::string::npos) << v.text;
}

// Between rounds (ranks in different collectives): one warning per interval
// from the oldest call's start, quoting what the engine says every rank
// waits in; none with the threshold at 0.
TEST(StallInspector, UnmatchedWaitWarnsOncePerInterval) {
  StallInspector s(/*rank=*/0, /*size=*/2, /*threshold_s=*/0.5);
  const TimePoint now = Clock::now();
  int asked = 0;
  auto describe = [&asked] {
    ++asked;
    return std::string("rank 0 waits in 'a'; rank 1 waits in 'b'");
  };
  s.begin_unmatched(now - std::chrono::milliseconds(200), 9.0, describe);
  EXPECT_EQ(s.on_block(now), now + std::chrono::milliseconds(300));  // not yet
  EXPECT_EQ(asked, 0);
  ::testing::internal::CaptureStderr();
  s.begin_unmatched(now - std::chrono::milliseconds(200), 9.0, describe);  // the same wait
  const TimePoint later = now + std::chrono::milliseconds(400);
  EXPECT_EQ(s.on_block(later), later + std::chrono::milliseconds(500));
  EXPECT_EQ(s.on_block(later + std::chrono::milliseconds(100)),
            later + std::chrono::milliseconds(500));
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(asked, 1);
  EXPECT_NE(err.find("stall: this rank has waited 0.6 s for the other ranks to ask for its "
                     "collectives: rank 0 waits in 'a'; rank 1 waits in 'b'. Warning every 0.5 s"),
            std::string::npos)
      << err;
  s.end_unmatched();
  EXPECT_EQ(s.on_block(later + std::chrono::seconds(5)), TimePoint::max());
  StallInspector quiet(0, 2, 0);
  quiet.begin_unmatched(now - std::chrono::seconds(100), 9.0, describe);
  EXPECT_EQ(quiet.on_block(now), TimePoint::max());
  EXPECT_EQ(asked, 1);
}

// Three ranks as threads; rank 1 stays away from its second all-reduce
// (like a stopped process: it answers nothing). Rank 2 waits on it directly;
// rank 0 waits on rank 2 and, with the shorter timeout, reaches its deadline
// first. Every waiting rank must name rank 1 and its address in its
// timeout, and rank 2 must raise a timeout, not a relayed "lost peer".
class HangTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HangTest, EveryWaitingRankNamesTheHungRank) {
  const int n = 3, port = testing_util::free_port();
  std::vector<std::string> what(n);
  std::vector<ErrorKind> kind(n, ErrorKind::kInternal);
  std::vector<double> took(n, 0);
  auto errors = testing_util::on_threads(n, [&](int r) {
    CommOptions o = testing_util::loopback_options(r, n, port);
    o.host_id = "one-host";
    o.transport = GetParam();
    o.stall_warning_s = 0;  // silent: the probe before the deadline still runs
    Communicator c(o);
    std::vector<float> x(1 << 16, 1.0f), y(x.size());
    c.allreduce(x.data(), y.data(), x.size(), DType::kFloat32, ReduceOp::kSum, Algorithm::kRing, 5);
    if (r == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      return;  // its communicator closes; the others are done by now
    }
    auto t0 = std::chrono::steady_clock::now();
    try {
      c.allreduce(x.data(), y.data(), x.size(), DType::kFloat32, ReduceOp::kSum, Algorithm::kRing,
                  r == 0 ? 1.0 : 1.4);
    } catch (const Error& e) {
      what[static_cast<size_t>(r)] = e.what();
      kind[static_cast<size_t>(r)] = e.kind();
    }
    took[static_cast<size_t>(r)] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
  for (int r : {0, 2}) {
    const std::string& w = what[static_cast<size_t>(r)];
    EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
    EXPECT_EQ(kind[static_cast<size_t>(r)], ErrorKind::kTimeout) << "rank " << r << ": " << w;
    EXPECT_NE(w.find("rank 1 (127.0.0.1:"), std::string::npos) << "rank " << r << ": " << w;
    EXPECT_LT(took[static_cast<size_t>(r)], 2.4) << "rank " << r;
  }
  // Rank 0 waited on rank 2 only, yet knew that rank 1 never answered.
  EXPECT_NE(what[0].find("has not joined this collective"), std::string::npos) << what[0];
}

INSTANTIATE_TEST_SUITE_P(Transports, HangTest, ::testing::Values("tcp", "shm"));

}  // namespace
}  // namespace pytfcomm
