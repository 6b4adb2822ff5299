// The algorithms on their own, over the in-memory transport (ranks as
// threads, no sockets): every algorithm on every rank count from 1 to 7 and
// awkward sizes, results checked exactly and across ranks; hierarchical
// groups from simulated hosts; and what ranks that disagree, or never come,
// make every rank see.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/algorithms.h"
#include "common/algorithm.h"
#include "common/error.h"
#include "memory_transport.h"
#include "observe/timeline.h"
#include "transport/topology.h"

namespace pytfcomm {
namespace {

using algorithms::CollectiveKind;
using algorithms::Group;
using testing_util::MemoryOptions;
using testing_util::run_in_memory;

// Small pipeline segments so that modest buffers still span many segments.
constexpr size_t kSegmentBytes = 4096;
constexpr size_t kSmallBytes = 1024;

Group world_of(const transport::DataPlane& t) {
  Group g;
  for (int r = 0; r < t.size(); ++r) g.ranks.push_back(r);
  g.me = t.rank();
  return g;
}

// One collective's metadata, as the engine fills it.
transport::MessageMeta meta_of(CollectiveKind kind, DType dt, ReduceOp op, size_t count,
                               uint32_t seq = 1, int root = 0) {
  transport::MessageMeta m;
  m.seq = seq;
  m.kind = static_cast<uint8_t>(kind);
  m.dtype = static_cast<uint8_t>(dt);
  m.op = static_cast<uint8_t>(op);
  m.root = root;
  m.count = count;
  return m;
}

// The algorithms this file runs by hand (not kAuto or kOneShot, which the engine picks
// or runs inside a negotiation round).
using Alg = Algorithm;
const char* alg_name(Alg a) { return algorithm_name(a); }

// All-reduce of `count` elements with `alg`; for hierarchical, rank r runs
// on host r % hosts.
void allreduce(transport::DataPlane& t, Alg alg, int hosts, const void* in, void* out, size_t count,
               DType dt, ReduceOp op, uint32_t seq = 1) {
  algorithms::Workspace ws;
  algorithms::Context ctx{t, meta_of(CollectiveKind::kAllreduce, dt, op, count, seq), ws,
                          kSegmentBytes};
  const Group world = world_of(t);
  switch (alg) {
    case Alg::kRing:
      algorithms::ring_allreduce(ctx, world, algorithms::Phase::kRing, in, out, count, dt, op,
                                 t.size());
      return;
    case Alg::kRecursiveDoubling:
      algorithms::recursive_doubling_allreduce(ctx, world, algorithms::Phase::kRecursiveDoubling,
                                               in, out, count, dt, op, t.size());
      return;
    case Alg::kHalvingDoubling:
      algorithms::halving_doubling_allreduce(ctx, world, algorithms::Phase::kHalvingDoubling, in,
                                             out, count, dt, op, t.size());
      return;
    case Alg::kHierarchical: {
      std::vector<std::string> names, ids;
      for (int r = 0; r < t.size(); ++r) {
        names.push_back("10.0.0." + std::to_string(r % hosts));
        ids.push_back("host" + std::to_string(r % hosts));
      }
      const transport::Topology topo = transport::make_topology(t.rank(), names, ids);
      ASSERT_TRUE(topo.uniform_hosts);
      const Group local{topo.local_ranks, topo.local_index};
      const Group cross{topo.cross_ranks, topo.cross_index};
      algorithms::hierarchical_allreduce(ctx, local, cross, in, out, count, dt, op, t.size(),
                                         kSmallBytes);
      return;
    }
    default:
      FAIL() << "not an algorithm this test runs: " << alg_name(alg);
  }
}

struct Case {
  int n;
  size_t count;
  Alg alg;
  int hosts = 1;
  size_t buffered = 0;  // MemoryOptions::buffered_bytes
};

class AllreduceTest : public ::testing::TestWithParam<Case> {};

TEST_P(AllreduceTest, SumAndMaxAreExactAndIdentical) {
  const Case c = GetParam();
  std::vector<std::vector<int64_t>> results(c.n);
  MemoryOptions mo;
  mo.buffered_bytes = c.buffered;
  auto errors = run_in_memory(
      c.n,
      [&](transport::Transport& t) {
        const int r = t.rank();
        std::vector<int64_t> in(c.count), out(c.count, -1);
        for (size_t i = 0; i < c.count; ++i) in[i] = static_cast<int64_t>(i * 7 + r * 1000003);
        allreduce(t, c.alg, c.hosts, in.data(), out.data(), c.count, DType::kInt64, ReduceOp::kSum);
        for (size_t i = 0; i < c.count; ++i) {
          int64_t want = static_cast<int64_t>(i * 7) * c.n + 1000003LL * (c.n * (c.n - 1) / 2);
          ASSERT_EQ(out[i], want) << "rank " << r << " element " << i;
          // Pieces are received into `out` and reduced there: the input stays as it was.
          ASSERT_EQ(in[i], static_cast<int64_t>(i * 7 + r * 1000003)) << "rank " << r;
        }
        // In place, max.
        allreduce(t, c.alg, c.hosts, in.data(), in.data(), c.count, DType::kInt64, ReduceOp::kMax,
                  2);
        for (size_t i = 0; i < c.count; ++i) {
          ASSERT_EQ(in[i], static_cast<int64_t>(i * 7 + (c.n - 1) * 1000003LL));
        }
        results[r] = out;
      },
      mo);
  for (int r = 0; r < c.n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  for (int r = 1; r < c.n; ++r) EXPECT_EQ(results[r], results[0]);
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (int n = 1; n <= 7; ++n) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{4099}, size_t{100000}}) {
      v.push_back({n, count, Alg::kRing});
      v.push_back({n, count, Alg::kRecursiveDoubling});
      v.push_back({n, count, Alg::kHalvingDoubling});
      for (int hosts : {2, 3}) {
        if (n > hosts && n % hosts == 0) v.push_back({n, count, Alg::kHierarchical, hosts});
      }
    }
  }
  // Buffered sends (a socket's or a ring's room) must change nothing.
  for (Alg a : {Alg::kRing, Alg::kRecursiveDoubling, Alg::kHierarchical, Alg::kHalvingDoubling}) {
    v.push_back({6, 100000, a, 2, size_t{1} << 20});
  }
  // Halving-doubling on 8 ranks (three halvings) and 9 (one member folded in).
  for (int n : {8, 9}) {
    for (size_t count : {size_t{5}, size_t{100003}}) v.push_back({n, count, Alg::kHalvingDoubling});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Memory, AllreduceTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           const Case& c = i.param;
                           std::string s = "n" + std::to_string(c.n) + "_count" +
                                           std::to_string(c.count) + "_" + alg_name(c.alg);
                           if (c.alg == Alg::kHierarchical) s += "_hosts" + std::to_string(c.hosts);
                           if (c.buffered) s += "_buffered";
                           return s;
                         });

// The algorithms need only the data plane: the timeline's wrapper
// (observe/traced_transport.h) is nothing else, and through it they give
// the very results they give on the transport itself.
TEST(Algorithms, RunOnTheTimelinesDataPlane) {
  char dir[] = "/tmp/pytfcomm-traced-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string pattern = std::string(dir) + "/t.json";
  const int n = 5;
  const size_t count = 30011;
  auto errors = run_in_memory(n, [&](transport::Transport& t) {
    auto tl = Timeline::open(pattern, t.rank(), n, "h");
    ASSERT_NE(tl, nullptr);
    transport::DataPlane& traced = tl->traced(t);
    ASSERT_NE(&traced, static_cast<transport::DataPlane*>(&t));
    ASSERT_EQ(traced.rank(), t.rank());
    ASSERT_EQ(traced.size(), n);
    uint32_t seq = 1;
    for (Alg a : {Alg::kRing, Alg::kRecursiveDoubling, Alg::kHalvingDoubling}) {
      std::vector<int64_t> in(count), out(count, -1), direct(count, -2);
      for (size_t i = 0; i < count; ++i) in[i] = static_cast<int64_t>(i * 3 + t.rank() * 1009);
      allreduce(traced, a, 1, in.data(), out.data(), count, DType::kInt64, ReduceOp::kSum, seq++);
      allreduce(t, a, 1, in.data(), direct.data(), count, DType::kInt64, ReduceOp::kSum, seq++);
      ASSERT_EQ(out, direct) << alg_name(a);
      ASSERT_EQ(out[count - 1], static_cast<int64_t>((count - 1) * 3 * n + 1009 * n * (n - 1) / 2))
          << alg_name(a);
    }
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    ::unlink(Timeline::path_for(pattern, r).c_str());
  }
  ::rmdir(dir);
}

TEST(Algorithms, MeanOfFloatsIsDividedOnce) {
  for (Alg a : {Alg::kRing, Alg::kRecursiveDoubling, Alg::kHierarchical, Alg::kHalvingDoubling}) {
    const int n = 6;
    auto errors = run_in_memory(n, [&](transport::Transport& t) {
      std::vector<float> x(777, static_cast<float>(t.rank() + 1)), y(777, -1.0f);
      allreduce(t, a, 2, x.data(), y.data(), x.size(), DType::kFloat32, ReduceOp::kMean);
      for (float v : y) ASSERT_EQ(v, 3.5f) << alg_name(a) << ", out of place";
      for (float v : x) ASSERT_EQ(v, static_cast<float>(t.rank() + 1)) << alg_name(a);
      allreduce(t, a, 2, x.data(), x.data(), x.size(), DType::kFloat32, ReduceOp::kMean, 2);
      for (float v : x) ASSERT_EQ(v, 3.5f) << alg_name(a) << ", in place";
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  }
}

TEST(Algorithms, BroadcastAllgatherReduceScatterBarrier) {
  for (int n = 1; n <= 7; ++n) {
    auto errors = run_in_memory(n, [&](transport::Transport& t) {
      const int r = t.rank();
      const Group world = world_of(t);
      algorithms::Workspace ws;
      uint32_t seq = 0;
      auto ctx = [&](CollectiveKind k, DType dt, size_t count, int root = 0) {
        return algorithms::Context{t, meta_of(k, dt, ReduceOp::kSum, count, ++seq, root), ws,
                                   kSegmentBytes};
      };
      for (size_t count : {size_t{0}, size_t{1}, size_t{5003}, size_t{70001}}) {
        for (int root = 0; root < n; ++root) {
          std::vector<float> buf(count, static_cast<float>(r));
          algorithms::broadcast(ctx(CollectiveKind::kBroadcast, DType::kFloat32, count, root),
                                world, buf.data(), count, DType::kFloat32, root);
          for (float v : buf) ASSERT_EQ(v, static_cast<float>(root));
        }
        // Never null, even for 0 elements: callers pass real arrays.
        std::vector<int32_t> mine(count + 1, r), all(count * n + 1, -1);
        algorithms::allgather(ctx(CollectiveKind::kAllgather, DType::kInt32, count), world,
                              mine.data(), all.data(), count, DType::kInt32);
        for (int k = 0; k < n; ++k) {
          for (size_t i = 0; i < count; i += 97) ASSERT_EQ(all[k * count + i], k);
        }
        std::vector<int32_t> full(count * n + 1), part(count + 1);
        std::iota(full.begin(), full.end(), 0);
        algorithms::reduce_scatter(ctx(CollectiveKind::kReduceScatter, DType::kInt32, count * n),
                                   world, full.data(), part.data(), count * n, DType::kInt32,
                                   ReduceOp::kSum, n);
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(part[i], n * static_cast<int32_t>(r * count + i));
        }
        algorithms::barrier(ctx(CollectiveKind::kBarrier, DType::kUInt8, 0), world);
      }
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "n " << n << " rank " << r;
  }
}

// Counts per rank: zero-count ranks, uneven ones, a large one.
std::vector<uint64_t> counts_of(int n, int pattern) {
  std::vector<uint64_t> c(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    switch (pattern) {
      case 0:  // all zero
        c[static_cast<size_t>(i)] = 0;
        break;
      case 1:  // uneven, some zero
        c[static_cast<size_t>(i)] = static_cast<uint64_t>((i * 37) % 5 == 0 ? 0 : i * 1001 + 3);
        break;
      case 2:  // one large (many segments), the rest small
        c[static_cast<size_t>(i)] = i == n / 2 ? 300001 : static_cast<uint64_t>(i + 1);
        break;
      default:  // equal
        c[static_cast<size_t>(i)] = 4099;
    }
  }
  return c;
}

TEST(Algorithms, AllgathervOfUnevenAndZeroCounts) {
  for (int n = 1; n <= 7; ++n) {
    auto errors = run_in_memory(n, [&](transport::Transport& t) {
      const int r = t.rank();
      const Group world = world_of(t);
      algorithms::Workspace ws;
      uint32_t seq = 0;
      for (int pattern = 0; pattern < 4; ++pattern) {
        const std::vector<uint64_t> counts = counts_of(n, pattern);
        const uint64_t total = std::accumulate(counts.begin(), counts.end(), uint64_t{0});
        std::vector<int32_t> mine(counts[static_cast<size_t>(r)] + 1);
        for (size_t i = 0; i < mine.size(); ++i) mine[i] = r * 1000003 + static_cast<int32_t>(i);
        std::vector<int32_t> all(total + 1, -1);
        algorithms::Context ctx{
            t, meta_of(CollectiveKind::kAllgatherv, DType::kInt32, ReduceOp::kSum, total, ++seq),
            ws, kSegmentBytes};
        algorithms::allgatherv(ctx, world, mine.data(), all.data(), counts.data(), DType::kInt32);
        size_t at = 0;
        for (int k = 0; k < n; ++k) {
          for (size_t i = 0; i < counts[static_cast<size_t>(k)]; ++i, ++at) {
            ASSERT_EQ(all[at], k * 1000003 + static_cast<int32_t>(i)) << "block " << k;
          }
        }
        ASSERT_EQ(all[total], -1);  // nothing past the end
      }
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "n " << n << " rank " << r;
  }
}

TEST(Algorithms, AlltoallvPairwiseOfUnevenAndZeroSplits) {
  for (int n = 1; n <= 7; ++n) {
    auto errors = run_in_memory(n, [&](transport::Transport& t) {
      const int r = t.rank();
      const Group world = world_of(t);
      algorithms::Workspace ws;
      uint32_t seq = 0;
      // What rank `from` sends rank `to` under `pattern`.
      auto split = [&](int pattern, int from, int to) -> uint64_t {
        switch (pattern) {
          case 0:
            return 0;
          case 1:
            return static_cast<uint64_t>((from + 2 * to) % 3 == 0 ? 0 : from * 7 + to * 3 + 1);
          case 2:
            return from == 0 && to == n - 1 ? 200003 : static_cast<uint64_t>(to + 1);
          default:
            return 777;
        }
      };
      auto value = [](int from, int to, size_t i) {
        return static_cast<int64_t>(from) * 1000000007 + to * 1000003 + static_cast<int64_t>(i);
      };
      for (int pattern = 0; pattern < 4; ++pattern) {
        std::vector<uint64_t> send(static_cast<size_t>(n)), recv(static_cast<size_t>(n), 99);
        std::vector<int64_t> in;
        for (int to = 0; to < n; ++to) {
          send[static_cast<size_t>(to)] = split(pattern, r, to);
          for (size_t i = 0; i < send[static_cast<size_t>(to)]; ++i) in.push_back(value(r, to, i));
        }
        in.push_back(-2);  // never null
        algorithms::Context ctx{
            t, meta_of(CollectiveKind::kAlltoallv, DType::kInt64, ReduceOp::kSum, 0, ++seq), ws,
            kSegmentBytes};
        algorithms::alltoallv_counts(ctx, world, send.data(), recv.data());
        uint64_t total = 0;
        for (int from = 0; from < n; ++from) {
          ASSERT_EQ(recv[static_cast<size_t>(from)], split(pattern, from, r));
          total += recv[static_cast<size_t>(from)];
        }
        std::vector<int64_t> out(total + 1, -1);
        algorithms::alltoallv(ctx, world, in.data(), send.data(), out.data(), recv.data(),
                              DType::kInt64);
        size_t at = 0;
        for (int from = 0; from < n; ++from) {
          for (size_t i = 0; i < recv[static_cast<size_t>(from)]; ++i, ++at) {
            ASSERT_EQ(out[at], value(from, r, i)) << "from " << from;
          }
        }
        ASSERT_EQ(out[total], -1);
      }
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "n " << n << " rank " << r;
  }
}

// Every rank fails, none hangs, and the ranks that saw the disagreement say
// it is one (their peers learn of it from their last words).
void expect_mismatch_everywhere(int n, const std::vector<std::string>& errors,
                                const std::vector<ErrorKind>& kinds) {
  int mismatches = 0;
  for (int r = 0; r < n; ++r) {
    EXPECT_NE(errors[r], "") << "rank " << r << " did not fail";
    EXPECT_TRUE(kinds[r] == ErrorKind::kMismatch || kinds[r] == ErrorKind::kPeerLost)
        << "rank " << r << ": " << errors[r];
    mismatches += kinds[r] == ErrorKind::kMismatch;
  }
  EXPECT_GT(mismatches, 0);
}

TEST(Mismatch, CountsThatDifferFailOnEveryRank) {
  for (int n : {2, 3, 4, 5, 7}) {
    for (Alg a : {Alg::kRing, Alg::kRecursiveDoubling, Alg::kHalvingDoubling}) {
      std::vector<ErrorKind> kinds;
      auto errors = run_in_memory(
          n,
          [&](transport::Transport& t) {
            size_t count = t.rank() == 1 ? 10 : 12;
            std::vector<float> x(count, 1.0f);
            allreduce(t, a, 1, x.data(), x.data(), count, DType::kFloat32, ReduceOp::kSum);
          },
          {}, &kinds);
      expect_mismatch_everywhere(n, errors, kinds);
    }
  }
}

TEST(Mismatch, OpDtypeOrShapeThatDifferFailOnEveryRank) {
  const int n = 4;
  for (int what = 0; what < 3; ++what) {
    std::vector<ErrorKind> kinds;
    auto errors = run_in_memory(
        n,
        [&](transport::Transport& t) {
          const bool odd = t.rank() == n - 1;
          std::vector<int32_t> x(64, 1);
          algorithms::Workspace ws;
          auto meta = meta_of(CollectiveKind::kAllreduce, DType::kInt32, ReduceOp::kSum, 64);
          if (odd && what == 0) meta.op = static_cast<uint8_t>(ReduceOp::kMax);
          if (odd && what == 1) meta.dtype = static_cast<uint8_t>(DType::kFloat32);
          meta.shape_tag = odd && what == 2 ? 0x1234 : 0x4321;
          algorithms::Context ctx{t, meta, ws, kSegmentBytes};
          algorithms::ring_allreduce(ctx, world_of(t), algorithms::Phase::kRing, x.data(), x.data(),
                                     x.size(), DType::kInt32, ReduceOp::kSum, n);
        },
        {}, &kinds);
    expect_mismatch_everywhere(n, errors, kinds);
  }
}

TEST(Mismatch, DifferentAlgorithmsFailInsteadOfExchangingGarbage) {
  const int n = 4;
  // Rank 0 against the others: every pair of algorithms that move the same
  // bytes in a different pattern.
  const std::pair<Alg, Alg> pairs[] = {{Alg::kRecursiveDoubling, Alg::kRing},
                                       {Alg::kHalvingDoubling, Alg::kRing},
                                       {Alg::kRing, Alg::kHalvingDoubling},
                                       {Alg::kHalvingDoubling, Alg::kRecursiveDoubling}};
  for (const auto& [odd, rest] : pairs) {
    std::vector<ErrorKind> kinds;
    auto errors = run_in_memory(
        n,
        [&](transport::Transport& t) {
          std::vector<int64_t> x(100, t.rank());
          allreduce(t, t.rank() == 0 ? odd : rest, 1, x.data(), x.data(), x.size(), DType::kInt64,
                    ReduceOp::kSum);
        },
        {}, &kinds);
    SCOPED_TRACE(std::string(alg_name(odd)) + " against " + alg_name(rest));
    expect_mismatch_everywhere(n, errors, kinds);
  }
}

TEST(Mismatch, MessageOverTheCapIsRefused) {
  MemoryOptions mo;
  mo.max_message = 1000;
  std::vector<ErrorKind> kinds;
  auto errors = run_in_memory(
      2,
      [&](transport::Transport& t) {
        std::vector<char> big(4000);
        auto meta = meta_of(CollectiveKind::kBroadcast, DType::kUInt8, ReduceOp::kSum, big.size());
        if (t.rank() == 0) {
          t.wait(t.post_send(1, big.data(), big.size(), meta));
        } else {
          t.wait(t.post_recv(0, big.data(), big.size(), meta));
        }
      },
      mo, &kinds);
  EXPECT_EQ(kinds[1], ErrorKind::kMismatch) << errors[1];
  EXPECT_NE(errors[1].find("over the limit"), std::string::npos) << errors[1];
  EXPECT_EQ(kinds[0], ErrorKind::kMismatch) << errors[0];  // told by rank 1's last words
}

TEST(Deadline, RanksWaitingOnOneThatNeverComesTimeOut) {
  const int n = 3;
  std::vector<ErrorKind> kinds;
  auto errors = run_in_memory(
      n,
      [&](transport::Transport& t) {
        if (t.rank() == 2) {  // hung: never posts, leaves late
          std::this_thread::sleep_for(std::chrono::milliseconds(500));
          return;
        }
        t.set_context("allreduce #1");
        t.set_deadline(deadline_after(0.1));
        std::vector<int64_t> x(10, 1);
        allreduce(t, Alg::kRing, 1, x.data(), x.data(), x.size(), DType::kInt64, ReduceOp::kSum);
      },
      {}, &kinds);
  EXPECT_EQ(errors[2], "");
  int timeouts = 0;
  for (int r = 0; r < 2; ++r) {
    // A rank waits on the hung one and times out; its neighbour may hear
    // that first (a timeout keeps its class when relayed).
    EXPECT_EQ(kinds[r], ErrorKind::kTimeout) << errors[r];
    timeouts += errors[r].find("timed out after") != std::string::npos;
  }
  EXPECT_GT(timeouts, 0);
}

TEST(Deadline, RankThatLeavesIsLostNotWaitedFor) {
  std::vector<ErrorKind> kinds;
  auto errors = run_in_memory(
      2,
      [&](transport::Transport& t) {
        if (t.rank() == 1) return;  // leaves without a word
        int64_t x = 0;
        t.wait(t.post_recv(1, &x, sizeof(x),
                           meta_of(CollectiveKind::kBroadcast, DType::kInt64, ReduceOp::kSum, 1)));
      },
      {}, &kinds);
  EXPECT_EQ(kinds[0], ErrorKind::kPeerLost) << errors[0];
  EXPECT_NE(errors[0].find("rank 1"), std::string::npos) << errors[0];
}

TEST(Pairs, MessagesArriveInPostingOrderPerDirection) {
  auto errors = run_in_memory(2, [&](transport::Transport& t) {
    const int peer = 1 - t.rank();
    std::vector<std::vector<uint8_t>> out(20), in(20);
    std::vector<transport::Handle> hs;
    for (size_t i = 0; i < out.size(); ++i) {
      out[i].assign(i * 37, static_cast<uint8_t>(i + 10 * t.rank()));
      in[i].assign(i * 37, 0);
      auto m = meta_of(CollectiveKind::kAllgather, DType::kUInt8, ReduceOp::kSum, i * 37);
      hs.push_back(t.post_send(peer, out[i].data(), out[i].size(), m));
      hs.push_back(t.post_recv(peer, in[i].data(), in[i].size(), m));
    }
    t.wait_all();
    for (size_t i = 0; i < in.size(); ++i) {
      for (uint8_t b : in[i]) ASSERT_EQ(b, static_cast<uint8_t>(i + 10 * peer));
    }
  });
  EXPECT_EQ(errors, std::vector<std::string>(2));
}

// A rank arms round k + 1 right after reading round k: two record buffers
// per rank are enough (transport/round_channel.h).
TEST(Rounds, EveryRankReadsEveryRecordOfARound) {
  const int n = 5;
  auto errors = run_in_memory(n, [&](transport::Transport& t) {
    for (uint64_t round = 1; round <= 4; ++round) {
      t.round_arm(round);
      char* box = t.round_outbox();
      const size_t bytes = static_cast<size_t>(t.rank()) + round;
      std::memset(box, 'a' + t.rank(), bytes);
      t.round_publish(bytes);
      t.wait_for([&] { return t.round_complete(); }, TimePoint::max());
      for (int r = 0; r < n; ++r) {
        size_t got = 0;
        const char* rec = t.round_record(r, &got);
        ASSERT_EQ(got, static_cast<size_t>(r) + round);
        for (size_t i = 0; i < got; ++i) ASSERT_EQ(rec[i], 'a' + r);
      }
    }
  });
  EXPECT_EQ(errors, std::vector<std::string>(n));
}

}  // namespace
}  // namespace pytfcomm
