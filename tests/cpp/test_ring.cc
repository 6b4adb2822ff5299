// Multi-rank tests of the algorithms over the real TCP transport, with the
// ranks as threads of this process (Gloo's style): every algorithm, awkward
// sizes and group sizes, results checked exactly and across ranks.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "engine/communicator.h"
#include "test_util.h"

namespace pytfcomm {
namespace {

// Small pipeline segments so that modest buffers still span many segments.
const bool kEnv = [] {
  setenv("PYTFCOMM_SEGMENT_BYTES", "4096", 0);
  setenv("PYTFCOMM_SMALL_BYTES", "1024", 0);
  setenv("PYTFCOMM_CONNECT_TIMEOUT", "30", 0);
  setenv("PYTFCOMM_TIMEOUT", "60", 0);
  return true;
}();

using testing_util::free_port;

// Runs fn(comm) on n ranks (threads); host_of(rank) simulates hosts.
void run_ranks(int n, const std::function<void(Communicator&)>& fn,
               const std::function<std::string(int)>& host_of = nullptr) {
  int port = free_port();
  auto errors = testing_util::on_threads(n, [&](int r) {
    CommOptions o = testing_util::loopback_options(r, n, port);
    o.host_id = host_of ? host_of(r) : "host";
    Communicator comm(o);
    fn(comm);
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

struct Case {
  int n;
  size_t count;
  Algorithm alg;
};

class AllreduceTest : public ::testing::TestWithParam<Case> {};

TEST_P(AllreduceTest, SumAndMaxAreExactAndIdentical) {
  const Case c = GetParam();
  std::vector<std::vector<int64_t>> results(c.n);
  run_ranks(
      c.n,
      [&](Communicator& comm) {
        int r = comm.rank();
        std::vector<int64_t> in(c.count), out(c.count, -1);
        for (size_t i = 0; i < c.count; ++i) in[i] = static_cast<int64_t>(i * 7 + r * 1000003);
        comm.allreduce(in.data(), out.data(), c.count, DType::kInt64, ReduceOp::kSum, c.alg, 0);
        for (size_t i = 0; i < c.count; ++i) {
          int64_t want = static_cast<int64_t>(i * 7) * c.n + 1000003LL * (c.n * (c.n - 1) / 2);
          ASSERT_EQ(out[i], want) << "rank " << r << " element " << i;
        }
        // In place, max.
        comm.allreduce(in.data(), in.data(), c.count, DType::kInt64, ReduceOp::kMax, c.alg, 0);
        for (size_t i = 0; i < c.count; ++i) {
          ASSERT_EQ(in[i], static_cast<int64_t>(i * 7 + (c.n - 1) * 1000003LL));
        }
        results[r] = out;
      },
      c.alg == Algorithm::kHierarchical
          ? std::function<std::string(int)>([](int r) { return r % 2 ? "hostB" : "hostA"; })
          : nullptr);
  for (int r = 1; r < c.n; ++r) EXPECT_EQ(results[r], results[0]);
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (int n : {1, 2, 3, 4, 5}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{4099}, size_t{100000}}) {
      v.push_back({n, count, Algorithm::kRing});
      v.push_back({n, count, Algorithm::kRecursiveDoubling});
      if (n % 2 == 0) v.push_back({n, count, Algorithm::kHierarchical});
    }
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Ring, AllreduceTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return "n" + std::to_string(i.param.n) + "_count" +
                                  std::to_string(i.param.count) + "_" + algorithm_name(i.param.alg);
                         });

TEST(Collectives, BroadcastAllgatherReduceScatterBarrier) {
  for (int n : {2, 3, 4}) {
    run_ranks(n, [&](Communicator& comm) {
      int r = comm.rank();
      const size_t count = 5003;
      std::vector<float> buf(count, static_cast<float>(r));
      comm.broadcast(buf.data(), count, DType::kFloat32, n - 1, 0);
      for (float v : buf) ASSERT_EQ(v, static_cast<float>(n - 1));
      std::vector<int32_t> mine(count, r), all(count * n, -1);
      comm.allgather(mine.data(), all.data(), count, DType::kInt32, 0);
      for (int k = 0; k < n; ++k) ASSERT_EQ(all[k * count + 17], k);
      std::vector<int32_t> full(count * n), part(count);
      std::iota(full.begin(), full.end(), 0);
      comm.reduce_scatter(full.data(), part.data(), full.size(), DType::kInt32, ReduceOp::kSum, 0);
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(part[i], n * static_cast<int>(r * count + i));
      comm.barrier(0);
    });
  }
}

TEST(Collectives, MismatchedCountsFailOnEveryRank) {
  std::vector<int> kinds(3, -1);
  run_ranks(3, [&](Communicator& comm) {
    size_t count = comm.rank() == 1 ? 10 : 12;
    std::vector<float> x(count, 1.0f);
    try {
      comm.allreduce(x.data(), x.data(), count, DType::kFloat32, ReduceOp::kSum, Algorithm::kRing,
                     0);
    } catch (const Error& e) {
      kinds[comm.rank()] = static_cast<int>(e.kind());
    }
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(kinds[r] == static_cast<int>(ErrorKind::kMismatch) ||
                kinds[r] == static_cast<int>(ErrorKind::kPeerLost))
        << "rank " << r << " got kind " << kinds[r];
  }
}

TEST(Collectives, ClosedCommunicatorRefusesWork) {
  run_ranks(1, [](Communicator& comm) {
    comm.close();
    float x = 1;
    EXPECT_THROW(comm.allreduce(&x, &x, 1, DType::kFloat32, ReduceOp::kSum, Algorithm::kAuto, 0),
                 Error);
  });
}

}  // namespace
}  // namespace pytfcomm
