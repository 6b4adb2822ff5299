// Communicator::join (Horovod's join) on real TCP ranks: ranks that joined
// take part in the others' collectives with nothing of their own, the
// others get exactly what the active ranks gave, join returns the rank that
// joined last everywhere, and afterwards every rank's calls pair up again.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/error.h"
#include "engine/communicator.h"
#include "test_util.h"

namespace pytfcomm {
namespace {

const bool kJoinEnv = [] {
  setenv("PYTFCOMM_SEGMENT_BYTES", "4096", 0);
  setenv("PYTFCOMM_CONNECT_TIMEOUT", "30", 0);
  setenv("PYTFCOMM_TIMEOUT", "60", 0);
  return true;
}();

using testing_util::run_ranks;

// Rank r runs r + 1 steps of every kind, then joins; small and large sizes.
TEST(Join, ActiveRanksGetWhatTheActiveRanksGave) {
  for (int n : {2, 3}) {
    std::vector<int> last(static_cast<size_t>(n), -2);
    run_ranks(n, [&](Communicator& comm) {
      const int r = comm.rank();
      for (size_t count : {size_t{5}, size_t{50000}}) {
        for (int step = 0; step <= r; ++step) {
          // Active at this step: ranks >= step.
          std::vector<float> x(count, static_cast<float>(r + 1)), y(count);
          comm.allreduce(x.data(), y.data(), count, DType::kFloat32, ReduceOp::kSum,
                         Algorithm::kAuto, 0);
          float want = 0;
          for (int q = step; q < n; ++q) want += static_cast<float>(q + 1);
          ASSERT_EQ(y[count - 1], want);
          std::vector<int32_t> m(count, r + 1), mo(count);
          comm.allreduce(m.data(), mo.data(), count, DType::kInt32, ReduceOp::kMin,
                         Algorithm::kAuto, 0);
          ASSERT_EQ(mo[0], step + 1);  // joined ranks gave the identity, not zero
          comm.allreduce(m.data(), mo.data(), count, DType::kInt32, ReduceOp::kProd,
                         Algorithm::kAuto, 0);
          int32_t prod = 1;
          for (int q = step; q < n; ++q) prod *= q + 1;
          ASSERT_EQ(mo[0], prod);
          std::vector<double> b(count, r == n - 1 ? 7.5 : 0.0);
          comm.broadcast(b.data(), count, DType::kFloat64, n - 1, 0);
          ASSERT_EQ(b[count - 1], 7.5);
          std::vector<int64_t> rows(static_cast<size_t>(r + 1), r), got;
          std::vector<uint64_t> counts(static_cast<size_t>(n));
          comm.allgatherv(
              rows.data(), rows.size(), DType::kInt64,
              [&](uint64_t total) {
                got.assign(total, -1);
                return static_cast<void*>(got.data());
              },
              counts.data(), 0);
          std::vector<int64_t> want_rows;
          for (int q = 0; q < n; ++q) {
            ASSERT_EQ(counts[static_cast<size_t>(q)],
                      q >= step ? static_cast<uint64_t>(q + 1) : 0u);
            if (q >= step) want_rows.insert(want_rows.end(), static_cast<size_t>(q + 1), q);
          }
          ASSERT_EQ(got, want_rows);
        }
        last[static_cast<size_t>(r)] = comm.join(0);
        // After everyone joined, plain calls pair up again.
        std::vector<float> x(count, 1.0f);
        comm.allreduce(x.data(), x.data(), count, DType::kFloat32, ReduceOp::kSum, Algorithm::kAuto,
                       0);
        ASSERT_EQ(x[0], static_cast<float>(n));
      }
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(last[static_cast<size_t>(r)], n - 1) << r;
  }
}

// What cannot run with a rank joined fails on the ranks that asked, with
// kMismatch; the communicator stays usable.
TEST(Join, CollectivesThatCannotRunFailOnTheAskers) {
  const int n = 3;
  std::vector<std::string> kinds(2 * n);
  std::vector<int> last(n, -2);
  run_ranks(n, [&](Communicator& comm) {
    const int r = comm.rank();
    if (r == 0) {
      last[0] = comm.join(0);
      return;
    }
    std::vector<float> x(4, 1.0f), out(4 * n);
    try {
      comm.allgather(x.data(), out.data(), 4, DType::kFloat32, 0);
    } catch (const Error& e) {
      kinds[static_cast<size_t>(r)] = error_kind_name(e.kind());
    }
    try {
      comm.broadcast(x.data(), 4, DType::kFloat32, 0, 0);  // root 0 has joined
    } catch (const Error& e) {
      kinds[static_cast<size_t>(n + r)] = error_kind_name(e.kind());
    }
    comm.allreduce(x.data(), x.data(), 4, DType::kFloat32, ReduceOp::kSum, Algorithm::kAuto, 0);
    EXPECT_EQ(x[0], 2.0f);
    last[static_cast<size_t>(r)] = comm.join(0);
  });
  EXPECT_TRUE(last[0] == 1 || last[0] == 2) << last[0];  // rank 0 joined first
  EXPECT_EQ(last[1], last[0]);
  EXPECT_EQ(last[2], last[0]);
  for (int r = 1; r < n; ++r) {
    EXPECT_EQ(kinds[static_cast<size_t>(r)], "mismatch") << r;
    EXPECT_EQ(kinds[static_cast<size_t>(n + r)], "mismatch") << r;
  }
}

}  // namespace
}  // namespace pytfcomm
