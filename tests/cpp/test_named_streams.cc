// Named streams (name=) keep no state once idle (docs/negotiation.md): a
// name's numbering goes once a call of it is agreed on every rank with
// nothing else of it in flight, and starts again at 0 on every rank alike,
// after a mismatch too (every rank keeps it), and on a joined rank, which
// follows the others; close() frees every stream's.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "engine/communicator.h"
#include "test_util.h"

namespace pytfcomm {
namespace {

const bool kNamedStreamsEnv = [] {
  setenv("PYTFCOMM_CONNECT_TIMEOUT", "30", 0);
  setenv("PYTFCOMM_TIMEOUT", "60", 0);
  return true;
}();

using testing_util::run_ranks;

double sum_named(Communicator& comm, const std::string& name, double mine, size_t count = 4) {
  const CallKey key{name};
  std::vector<double> x(count, mine), y(count);
  comm.allreduce(x.data(), y.data(), count, DType::kFloat64, ReduceOp::kSum, Algorithm::kAuto, 0, 0,
                 &key);
  return y[0];
}

TEST(NamedStreams, DistinctNamesKeepNoStateAndFreedNamesPairAgain) {
  std::vector<size_t> held(2), closed(2);
  run_ranks(2, [&](Communicator& comm) {
    const int r = comm.rank();
    for (int i = 0; i < 500; ++i) {
      ASSERT_EQ(sum_named(comm, "g" + std::to_string(i), i + r), 2.0 * i + 1);
    }
    held[static_cast<size_t>(r)] = comm.stream_states();
    for (int k = 0; k < 5; ++k) ASSERT_EQ(sum_named(comm, "g0", 10.0 * k + r), 20.0 * k + 1);
    comm.close();
    closed[static_cast<size_t>(r)] = comm.stream_states();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(held[static_cast<size_t>(r)], 0u) << r;
    EXPECT_EQ(closed[static_cast<size_t>(r)], 0u) << r;
  }
}

TEST(NamedStreams, AMismatchKeepsTheNumberingOnEveryRank) {
  std::vector<std::string> kinds(2);
  std::vector<double> after(2);
  run_ranks(2, [&](Communicator& comm) {
    const int r = comm.rank();
    try {
      sum_named(comm, "m", 1.0, r == 0 ? 4 : 5);  // counts differ
    } catch (const Error& e) {
      kinds[static_cast<size_t>(r)] = error_kind_name(e.kind());
    }
    after[static_cast<size_t>(r)] = sum_named(comm, "m", r + 1.0);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(kinds[static_cast<size_t>(r)], "mismatch") << r;
    EXPECT_EQ(after[static_cast<size_t>(r)], 3.0) << r;
  }
}

TEST(NamedStreams, AJoinedRankFollowsTheOthersRestart) {
  std::vector<double> after(3);
  run_ranks(3, [&](Communicator& comm) {
    const int r = comm.rank();
    if (r != 2) {
      for (int k = 0; k < 3; ++k) ASSERT_EQ(sum_named(comm, "late", 1.0), 2.0);  // rank 2 joined
    }
    comm.join(0);
    after[static_cast<size_t>(r)] = sum_named(comm, "late", r + 1.0);
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(after[static_cast<size_t>(r)], 6.0) << r;
}

}  // namespace
}  // namespace pytfcomm
