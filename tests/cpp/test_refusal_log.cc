// RefusalLog: refused connections are logged in full a few times, then
// summarised per address and interval, with bounded lines and memory under a
// flood from one address or from thousands, and without losing count.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "transport/tcp/handshake.h"

namespace pytfcomm::tcp {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

const char* kBadMagic = "not a pytfcomm connection (bad magic number)";
const char* kClosed = "closed before completing its handshake";

// Every line a listener logged, and the refusals they account for: one per
// full line, N per "refused N [more] connection(s)" summary.
struct Logged {
  std::vector<std::string> lines;
  long refusals = 0;

  void add(const std::string& line) {
    if (line.empty()) return;
    lines.push_back(line);
    const std::string full = "refused connection from ";
    if (line.compare(0, full.size(), full) == 0) {
      ++refusals;
    } else {
      EXPECT_EQ(line.compare(0, 8, "refused "), 0) << line;
      refusals += std::strtol(line.c_str() + 8, nullptr, 10);
    }
  }
  void add(const std::vector<std::string>& more) {
    for (const auto& l : more) add(l);
  }
};

TEST(RefusalLog, FirstRefusalsInFullThenOneSummaryPerInterval) {
  RefusalLog log("rank 0's rendezvous");
  Logged out;
  TimePoint t0 = Clock::now();
  for (int i = 0; i < 5; ++i) {
    std::string line = log.refuse("127.0.0.1:4000" + std::to_string(i), kBadMagic, t0);
    EXPECT_EQ(line, "refused connection from 127.0.0.1:4000" + std::to_string(i) +
                        " to rank 0's rendezvous: " + kBadMagic);
    out.add(line);
  }
  // The sixth and later are only counted, by reason...
  for (int i = 0; i < 1000; ++i) {
    out.add(log.refuse("127.0.0.1:5000", i % 4 ? kBadMagic : kClosed, t0 + milliseconds(i)));
  }
  EXPECT_EQ(out.lines.size(), 5u);
  out.add(log.flush(t0 + seconds(9)));  // ...not summarised before the interval is over,
  EXPECT_EQ(out.lines.size(), 5u);
  out.add(log.flush(t0 + seconds(11)));  // then once.
  ASSERT_EQ(out.lines.size(), 6u);
  EXPECT_EQ(out.lines[5],
            "refused 1000 more connections from 127.0.0.1 to rank 0's rendezvous in the last "
            "11.0 s (not logged one by one); reasons: " +
                std::string(kClosed) + " [250], " + kBadMagic + " [750]");
  out.add(log.flush(t0 + seconds(12)));
  EXPECT_EQ(out.lines.size(), 6u);  // nothing new to say
  EXPECT_EQ(out.refusals, 1005);
}

TEST(RefusalLog, FloodFromOneAddressStaysSmall) {
  // 40,000 connections a second for 15 s (issue 13: 88,344 lines), the
  // listener flushing every 100 ms as accept_peers does.
  RefusalLog log("rank 0's rendezvous");
  Logged out;
  TimePoint t0 = Clock::now();
  long n = 0;
  for (int tick = 0; tick < 150; ++tick) {
    TimePoint now = t0 + milliseconds(100 * tick);
    for (int i = 0; i < 4000; ++i, ++n) {
      out.add(log.refuse("10.1.2.3:" + std::to_string(1024 + i), kBadMagic, now));
    }
    out.add(log.flush(now));
  }
  out.add(log.flush(t0 + seconds(15), true));
  EXPECT_LE(out.lines.size(), 5u + 2u + 1u) << out.lines.back();
  EXPECT_EQ(out.refusals, n);
  EXPECT_EQ(log.tracked(), 1u);
}

TEST(RefusalLog, FloodFromManyAddressesIsBoundedInLinesAndMemory) {
  RefusalLog::Limits limits;
  RefusalLog log("rank 2's listener", limits);
  Logged out;
  TimePoint t0 = Clock::now();
  long n = 0;
  for (int tick = 0; tick < 150; ++tick) {  // 15 s, a new address for every connection
    TimePoint now = t0 + milliseconds(100 * tick);
    for (int i = 0; i < 1000; ++i, ++n) {
      std::string ip = "10." + std::to_string(n >> 16 & 255) + "." + std::to_string(n >> 8 & 255) +
                       "." + std::to_string(n & 255);
      out.add(log.refuse(ip + ":999", kClosed, now));
      EXPECT_LE(log.tracked(), limits.max_sources);
    }
    out.add(log.flush(now));
  }
  out.add(log.flush(t0 + seconds(15), true));
  // Per interval: a few full lines, one summary per tracked address and one
  // for all the others; two intervals plus the final flush.
  size_t per_interval = limits.lines_per_interval + limits.max_sources + 1;
  EXPECT_LE(out.lines.size(), 3 * per_interval);
  EXPECT_EQ(out.refusals, n);
  bool others = false;
  for (const auto& l : out.lines) others |= l.find("from other addresses") != std::string::npos;
  EXPECT_TRUE(others);
}

TEST(RefusalLog, QuietAddressIsForgottenAndLoggedInFullAgain) {
  RefusalLog log("rank 0's rendezvous");
  TimePoint t0 = Clock::now();
  for (int i = 0; i < 6; ++i) log.refuse("127.0.0.1:1", kClosed, t0);
  EXPECT_EQ(log.refuse("127.0.0.1:1", kClosed, t0 + seconds(5)), "");
  EXPECT_EQ(log.flush(t0 + seconds(10)).size(), 1u);
  EXPECT_EQ(log.tracked(), 1u);  // refused 5 s ago: still flooding, still summarised
  EXPECT_TRUE(log.flush(t0 + seconds(15)).empty());
  EXPECT_EQ(log.tracked(), 0u);  // quiet for an interval: its slot is free again
  EXPECT_NE(log.refuse("127.0.0.1:2", kClosed, t0 + seconds(30)), "");
}

TEST(RefusalLog, ReasonsAndTheirTextAreBounded) {
  RefusalLog::Limits limits;
  limits.lines_per_source = 0;
  limits.max_reasons = 2;
  RefusalLog log("rank 0's rendezvous", limits);
  TimePoint t0 = Clock::now();
  std::string huge(100000, 'x');
  log.refuse("[::1]:7", huge, t0);
  for (int i = 0; i < 10; ++i) log.refuse("[::1]:7", "reason " + std::to_string(i), t0);
  auto lines = log.flush(t0, true);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_LT(lines[0].size(), 500u) << lines[0];
  EXPECT_NE(lines[0].find("refused 11 connections from ::1 "), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("reason 0 [1], other reasons [9]"), std::string::npos) << lines[0];
}

TEST(RefusalLog, FinalFlushReportsEverythingCounted) {
  RefusalLog log("rank 0's rendezvous");
  Logged out;
  TimePoint t0 = Clock::now();
  for (int i = 0; i < 7; ++i) out.add(log.refuse("127.0.0.1:9", kBadMagic, t0));
  out.add(log.flush(t0 + milliseconds(500)));
  EXPECT_EQ(out.lines.size(), 5u);
  out.add(log.flush(t0 + milliseconds(500), true));
  ASSERT_EQ(out.lines.size(), 6u);
  EXPECT_NE(out.lines[5].find("refused 2 more connections from 127.0.0.1 to rank 0's rendezvous "
                              "in the last 0.5 s"),
            std::string::npos)
      << out.lines[5];
  EXPECT_EQ(out.refusals, 7);
}

}  // namespace
}  // namespace pytfcomm::tcp
