// Whole communicators over the real transport (TCP on loopback, ranks as
// threads of this process): the engine's collectives end to end, and what
// it does when ranks disagree or it is closed.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "engine/communicator.h"
#include "engine/fusion.h"
#include "engine/fusion_queue.h"
#include "engine/user_interrupt.h"
#include "test_util.h"

namespace pytfcomm {
namespace {

// Small pipeline segments so that modest buffers still span many segments.
const bool kCommunicatorEnv = [] {
  setenv("PYTFCOMM_SEGMENT_BYTES", "4096", 0);
  setenv("PYTFCOMM_SMALL_BYTES", "1024", 0);
  setenv("PYTFCOMM_CONNECT_TIMEOUT", "30", 0);
  setenv("PYTFCOMM_TIMEOUT", "60", 0);
  return true;
}();

using testing_util::free_port;
using testing_util::run_ranks;

// Each all-reduce algorithm through the engine on real TCP (the algorithms
// themselves are tested on every rank count in test_algorithms.cc).
TEST(Collectives, EveryAllreduceAlgorithmOverTcp) {
  const int n = 4;
  const size_t count = 4099;
  run_ranks(
      n,
      [&](Communicator& comm) {
        int r = comm.rank();
        for (Algorithm a : {Algorithm::kRing, Algorithm::kRecursiveDoubling,
                            Algorithm::kHierarchical, Algorithm::kAuto}) {
          std::vector<int64_t> in(count), out(count, -1);
          for (size_t i = 0; i < count; ++i) in[i] = static_cast<int64_t>(i * 7 + r * 1000003);
          comm.allreduce(in.data(), out.data(), count, DType::kInt64, ReduceOp::kSum, a, 0);
          for (size_t i = 0; i < count; ++i) {
            int64_t want = static_cast<int64_t>(i * 7) * n + 1000003LL * (n * (n - 1) / 2);
            ASSERT_EQ(out[i], want) << algorithm_name(a) << " rank " << r << " element " << i;
          }
        }
      },
      [](int r) { return r % 2 ? "hostB" : "hostA"; });
}

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

// Per-rank counts through the engine: small (within the round), large
// (the ring), equal (the equal all-gather), zero; the counts come back.
TEST(Collectives, AllgathervAndAlltoallvWithPerRankCounts) {
  for (int n : {1, 2, 3}) {
    run_ranks(n, [&](Communicator& comm) {
      const int r = comm.rank();
      for (size_t scale : {size_t{1}, size_t{40000}}) {
        for (bool equal : {false, true}) {
          const size_t mine = equal ? 3 * scale : (r == 1 ? 0 : (r + 1) * scale);
          std::vector<int32_t> in(mine + 1, r);
          std::vector<int32_t> out;
          std::vector<uint64_t> counts(static_cast<size_t>(n), 99);
          comm.allgatherv(
              in.data(), mine, DType::kInt32,
              [&](uint64_t total) {
                out.assign(total + 1, -1);
                return static_cast<void*>(out.data());
              },
              counts.data(), 0, 0x1234);
          size_t at = 0;
          for (int k = 0; k < n; ++k) {
            const size_t want = equal ? 3 * scale : (k == 1 ? 0 : (k + 1) * scale);
            ASSERT_EQ(counts[static_cast<size_t>(k)], want);
            for (size_t i = 0; i < want; ++i, ++at) ASSERT_EQ(out[at], k);
          }
          ASSERT_EQ(out.size(), at + 1);
        }
        // alltoallv: rank r sends (r + 1) * (to + 1) * scale elements to rank `to`.
        std::vector<uint64_t> send(static_cast<size_t>(n)), recv(static_cast<size_t>(n));
        std::vector<int64_t> in;
        for (int to = 0; to < n; ++to) {
          send[static_cast<size_t>(to)] =
              to == r ? 0 : static_cast<uint64_t>((r + 1) * (to + 1)) * scale;
          in.insert(in.end(), send[static_cast<size_t>(to)], int64_t{r} * 100 + to);
        }
        in.push_back(0);
        std::vector<int64_t> out;
        comm.alltoallv(
            in.data(), send.data(), DType::kInt64,
            [&](uint64_t total) {
              out.assign(total + 1, -1);
              return static_cast<void*>(out.data());
            },
            recv.data(), 0, 0x1234);
        size_t at = 0;
        for (int from = 0; from < n; ++from) {
          const uint64_t want = from == r ? 0 : static_cast<uint64_t>((from + 1) * (r + 1)) * scale;
          ASSERT_EQ(recv[static_cast<size_t>(from)], want);
          for (size_t i = 0; i < want; ++i, ++at) ASSERT_EQ(out[at], int64_t{from} * 100 + r);
        }
      }
    });
  }
}

// The row's shape or the dtype differ: a mismatch on every rank, before
// anything moves; the communicator stays usable.
TEST(Collectives, PerRankCountKindsThatDisagreeFailOnEveryRank) {
  const int n = 3;
  std::vector<int> kinds(2 * n, -1);
  run_ranks(n, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<int64_t> in(8, r), out(64);
    std::vector<uint64_t> counts(n), send(n, 1);
    auto alloc = [&](uint64_t) { return static_cast<void*>(out.data()); };
    try {
      comm.allgatherv(in.data(), 2 + r, DType::kInt64, alloc, counts.data(), 0,
                      r == 2 ? 0x99u : 0x11u);
    } catch (const Error& e) {
      kinds[static_cast<size_t>(r)] = static_cast<int>(e.kind());
    }
    try {
      comm.alltoallv(in.data(), send.data(), r == 0 ? DType::kFloat64 : DType::kInt64, alloc,
                     counts.data(), 0, 0x11u);
    } catch (const Error& e) {
      kinds[static_cast<size_t>(n + r)] = static_cast<int>(e.kind());
    }
    comm.allgatherv(in.data(), 1, DType::kInt64, alloc, counts.data(), 0, 0x11u);
    ASSERT_EQ(out[2], 2);
  });
  for (int i = 0; i < 2 * n; ++i) {
    EXPECT_EQ(kinds[static_cast<size_t>(i)], static_cast<int>(ErrorKind::kMismatch)) << i;
  }
}

// Horovod's contract: ranks that disagree all raise kMismatch (never
// kPeerLost from a peer's abort), nothing moved, and the next collective
// works on every rank with the right result.
TEST(Collectives, MismatchedCountsFailOnEveryRankAndLeaveItUsable) {
  std::vector<int> kinds(3, -1);
  std::vector<float> after(3, -1.0f);
  run_ranks(3, [&](Communicator& comm) {
    for (size_t big : {size_t{12}, size_t{1} << 20}) {  // one-shot, then ring
      size_t count = comm.rank() == 1 ? big - 2 : big;
      std::vector<float> x(count, 1.0f);
      try {
        comm.allreduce(x.data(), x.data(), count, DType::kFloat32, ReduceOp::kSum,
                       big > 100 ? Algorithm::kRing : Algorithm::kAuto, 0);
      } catch (const Error& e) {
        kinds[comm.rank()] = static_cast<int>(e.kind());
      }
      EXPECT_FALSE(comm.closed());
      std::vector<float> y(big, static_cast<float>(comm.rank() + 1));
      comm.allreduce(y.data(), y.data(), big, DType::kFloat32, ReduceOp::kSum, Algorithm::kAuto, 0);
      after[comm.rank()] = y[big - 1];
    }
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(kinds[r], static_cast<int>(ErrorKind::kMismatch)) << "rank " << r;
    EXPECT_EQ(after[r], 6.0f) << "rank " << r;
  }
}

// The async queue: rank 1's first request mismatches and its second comes
// late, so the ranks' queues differ when the mismatch strikes. Only the
// agreed batch fails; the second request still pairs up and is right.
TEST(Collectives, AsyncMismatchFailsOnlyTheAgreedBatch) {
  std::vector<int> kinds(2, -1);
  std::vector<float> second(2, -1.0f);
  run_ranks(2, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<float> a(r == 1 ? 99 : 100, 1.0f), b(8, static_cast<float>(r + 1));
    auto submit = [&](std::vector<float>& v) {
      FusionRequest q{v.data(), v.data(), v.size(), DType::kFloat32};
      return comm.fusion().allreduce_async(q, ReduceOp::kSum, Algorithm::kAuto, 20, 0);
    };
    auto h1 = submit(a);
    if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    auto h2 = submit(b);
    try {
      h1->wait(-1);
    } catch (const Error& e) {
      kinds[r] = static_cast<int>(e.kind());
    }
    try {
      if (h2->wait(30)) second[r] = b[7];
    } catch (const Error& e) {
      ADD_FAILURE() << "rank " << r << ": " << e.what();
    }
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(kinds[r], static_cast<int>(ErrorKind::kMismatch)) << "rank " << r;
    EXPECT_EQ(second[r], 3.0f) << "rank " << r;
  }
}

// submit_async(..., may_drive): the submitting thread runs the engine for
// its own requests while the others keep up (PYTFCOMM_ASYNC_DRIVE_US), else
// hands over to the engine's thread. Either way every result is right and
// on_done runs once per request.
struct DrivenBatch {
  std::vector<std::vector<float>> bufs;
  std::vector<std::thread::id> done_on;
  std::atomic<int> done{0};
  std::atomic<int> failed{0};
};

void submit_driven(Communicator& comm, DrivenBatch& b, const std::vector<size_t>& counts) {
  const int r = comm.rank();
  std::vector<std::unique_ptr<Request>> reqs;
  b.bufs.clear();
  b.done_on.assign(counts.size(), std::thread::id());
  for (size_t i = 0; i < counts.size(); ++i) {
    b.bufs.emplace_back(counts[i], static_cast<float>(r + 1 + static_cast<int>(i)));
    float* p = b.bufs.back().data();
    reqs.push_back(comm.make_request(algorithms::CollectiveKind::kAllreduce, p, p, counts[i],
                                     DType::kFloat32, ReduceOp::kSum, Algorithm::kAuto, 0, 30, 7));
    reqs.back()->on_done = [&b, i](std::exception_ptr e) {
      b.done_on[i] = std::this_thread::get_id();
      if (e) b.failed.fetch_add(1);
      b.done.fetch_add(1);
    };
  }
  comm.submit_async(std::move(reqs), 0x5eed, "driven", true);
}

void check_driven(const DrivenBatch& b, int n, int r) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (b.done.load() < static_cast<int>(b.bufs.size()) &&
         std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(b.done.load(), static_cast<int>(b.bufs.size())) << "rank " << r;
  ASSERT_EQ(b.failed.load(), 0) << "rank " << r;
  for (size_t i = 0; i < b.bufs.size(); ++i) {
    const float want = static_cast<float>(n * (n + 1) / 2 + n * static_cast<int>(i));
    for (float v : b.bufs[i]) ASSERT_EQ(v, want) << "rank " << r << " buffer " << i;
  }
}

// n ranks on threads of this process, one host, over `transport` ("tcp"/"shm").
void on_transport(int n, const char* transport, const std::function<void(Communicator&)>& fn) {
  const int port = free_port();
  auto errors = testing_util::on_threads(n, [&](int r) {
    CommOptions o = testing_util::loopback_options(r, n, port);
    o.host_id = "host";
    o.transport = transport;
    Communicator comm(o);
    fn(comm);
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << transport << r;
}

void on_transports(int n, const std::function<void(Communicator&)>& fn) {
  for (const char* transport : {"tcp", "shm"}) on_transport(n, transport, fn);
}

// Sets a variable for one test and puts back what was there.
struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  const char* name_;
  std::string old_;
  bool had_ = false;
};

// Ranks that submit together: one-shot and multi-segment sizes, several
// batches in a row, and with a generous budget the submitter runs them all.
TEST(SubmitAsync, TheSubmitterRunsItsOwnCollectivesWhenTheEngineIsIdle) {
  ScopedEnv budget("PYTFCOMM_ASYNC_DRIVE_US", "10000000");
  ScopedEnv no_beats("PYTFCOMM_PEER_TIMEOUT", "off");  // the heartbeat briefly drives too
  for (int n : {2, 3}) {
    on_transports(n, [&](Communicator& comm) {
      for (int round = 0; round < 5; ++round) {
        DrivenBatch b;
        submit_driven(comm, b, {5, 40000, 1});
        // Nobody else drove: everything ran on this thread, before returning.
        ASSERT_EQ(b.done.load(), 3) << "rank " << comm.rank() << " batch " << round;
        for (const auto& id : b.done_on) ASSERT_EQ(id, std::this_thread::get_id());
        check_driven(b, n, comm.rank());
      }
    });
  }
}

// A peer that comes late: the submitter gives up after its budget and the
// engine's thread finishes the collectives when the peer arrives.
TEST(SubmitAsync, ALatePeerDoesNotHoldTheSubmitter) {
  ScopedEnv budget("PYTFCOMM_ASYNC_DRIVE_US", "2000");
  on_transports(2, [&](Communicator& comm) {
    static std::atomic<bool> peer_submitted{false};
    peer_submitted = false;
    DrivenBatch b;
    if (comm.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      peer_submitted = true;
      submit_driven(comm, b, {5, 40000});
    } else {
      submit_driven(comm, b, {5, 40000});
      EXPECT_FALSE(peer_submitted.load()) << "the submitter waited for the late peer";
      EXPECT_EQ(b.done.load(), 0);
    }
    check_driven(b, 2, comm.rank());
    if (comm.rank() == 0) {
      for (const auto& id : b.done_on) EXPECT_NE(id, std::this_thread::get_id());
    }
  });
}

// PYTFCOMM_ASYNC_DRIVE_US=0: the engine's thread runs every asynchronous
// collective, as before the submitter could.
TEST(SubmitAsync, ZeroBudgetLeavesEverythingToTheEnginesThread) {
  ScopedEnv budget("PYTFCOMM_ASYNC_DRIVE_US", "0");
  on_transports(2, [&](Communicator& comm) {
    DrivenBatch b;
    submit_driven(comm, b, {5, 40000});
    check_driven(b, 2, comm.rank());
    for (const auto& id : b.done_on) EXPECT_NE(id, std::this_thread::get_id());
  });
}

// Ctrl-C while only TF ops wait (bindings/sigint_watch.cc calls
// interrupt_unattended_all()): the requests submit_async took fail with
// kInterrupted at once, the communicator closes and the peer is told; with
// nothing of the kind pending it does nothing.
TEST(SubmitAsync, InterruptUnattendedFailsTheWaitingRequestsAndTellsThePeer) {
  ScopedEnv budget("PYTFCOMM_ASYNC_DRIVE_US", "2000");
  on_transports(2, [&](Communicator& comm) {
    static std::atomic<bool> interrupted{false};
    interrupted = false;
    EXPECT_FALSE(comm.interrupt_unattended()) << "nothing pending";
    if (comm.rank() == 0) {
      std::vector<float> small(5, 1.0f), large(40000, 1.0f);
      std::atomic<int> done{0}, kinds_ok{0};
      std::vector<std::unique_ptr<Request>> reqs;
      for (std::vector<float>* v : {&small, &large}) {
        reqs.push_back(comm.make_request(algorithms::CollectiveKind::kAllreduce, v->data(),
                                         v->data(), v->size(), DType::kFloat32, ReduceOp::kSum,
                                         Algorithm::kAuto, 0, 60, 7));
        reqs.back()->on_done = [&](std::exception_ptr e) {
          try {
            if (e) std::rethrow_exception(e);
          } catch (const Error& err) {
            if (err.kind() == ErrorKind::kInterrupted &&
                std::string(err.what()).find("Ctrl-C") != std::string::npos) {
              kinds_ok.fetch_add(1);
            }
          }
          done.fetch_add(1);
        };
      }
      comm.submit_async(std::move(reqs), 0x5eed, "waits", true);
      EXPECT_EQ(unattended_waits(), 2);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      EXPECT_EQ(done.load(), 0) << "the peer never joins";
      const auto t0 = std::chrono::steady_clock::now();
      EXPECT_TRUE(comm.interrupt_unattended());
      while (done.load() < 2 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      EXPECT_EQ(done.load(), 2);
      EXPECT_EQ(kinds_ok.load(), 2);
      EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
      EXPECT_EQ(unattended_waits(), 0);
      EXPECT_TRUE(comm.closed());
      interrupted = true;
    } else {
      while (!interrupted.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      std::vector<float> v(5, 1.0f);
      try {
        comm.allreduce(v.data(), v.data(), v.size(), DType::kFloat32, ReduceOp::kSum,
                       Algorithm::kAuto, 10);
        ADD_FAILURE() << "the peer's collective succeeded";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kPeerLost) << e.what();
        EXPECT_NE(std::string(e.what()).find("interrupted by the user"), std::string::npos)
            << e.what();
      }
    }
  });
}

// Segments are agreed at setup. When ranks outnumber cores and talk over
// TCP, a ring all-reduce whose chunk per rank (a halving-doubling one whose
// first half) holds two segments of PYTFCOMM_OVERSUB_SEGMENT_BYTES uses that
// size; otherwise (shared memory, a core per rank, smaller exchanges, another
// algorithm, or it off) PYTFCOMM_SEGMENT_BYTES.
TEST(Segments, LargerSegmentsOverTcpOnlyWhenRanksOutnumberCores) {
  ScopedEnv seg("PYTFCOMM_SEGMENT_BYTES", "262144");
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  for (int n : {2, 4}) {
    const bool over = static_cast<unsigned>(n) > cores;
    for (const char* transport : {"tcp", "shm"}) {
      for (const char* big : {"524288", "off"}) {
        ScopedEnv oversub("PYTFCOMM_OVERSUB_SEGMENT_BYTES", big);
        on_transport(n, transport, [&](Communicator& comm) {
          const bool on = over && std::string(transport) == "tcp" && std::string(big) != "off";
          const size_t mib = 1 << 20;
          const size_t n_bytes = static_cast<size_t>(n);
          // The ring: two 512 KiB segments per rank's chunk, and just short of that.
          EXPECT_EQ(comm.allreduce_segment(Algorithm::kRing, n_bytes * mib), on ? 524288u : 262144u)
              << n;
          EXPECT_EQ(comm.allreduce_segment(Algorithm::kRing, n_bytes * mib - 4), 262144u) << n;
          EXPECT_EQ(comm.allreduce_segment(Algorithm::kRing, 64 * mib), on ? 524288u : 262144u)
              << n;
          EXPECT_EQ(comm.allreduce_segment(Algorithm::kRing, 100), 262144u) << n;
          // Halving-doubling: two in the half its first exchange swaps, whatever n.
          EXPECT_EQ(comm.allreduce_segment(Algorithm::kHalvingDoubling, 2 * mib),
                    on ? 524288u : 262144u)
              << n;
          EXPECT_EQ(comm.allreduce_segment(Algorithm::kHalvingDoubling, 2 * mib - 4), 262144u) << n;
          // The others keep the agreed segment.
          for (Algorithm a : {Algorithm::kRecursiveDoubling, Algorithm::kHierarchical}) {
            EXPECT_EQ(comm.allreduce_segment(a, 64 * mib), 262144u) << n;
          }
          // And the results are right at sizes around those cuts.
          std::vector<Algorithm> algs{Algorithm::kRing};
          if (n == 4) algs.push_back(Algorithm::kHalvingDoubling);
          for (Algorithm a : algs) {
            for (size_t count :
                 {size_t{65537}, n_bytes * mib / 4 - 1, n_bytes * mib / 4, n_bytes * mib / 4 + 3,
                  size_t{1} << 19, (size_t{1} << 19) + 5, size_t{3} << 20}) {
              std::vector<float> v(count, static_cast<float>(comm.rank() + 1));
              for (size_t i = 0; i < count; i += 4099) v[i] += static_cast<float>(i % 7);
              comm.allreduce(v.data(), v.data(), count, DType::kFloat32, ReduceOp::kSum, a, 0);
              auto sum_at = [n](size_t i) {
                const float extra = i % 4099 == 0 ? static_cast<float>(n * (i % 7)) : 0.0f;
                return n * (n + 1) / 2.0f + extra;
              };
              for (size_t i = 0; i < count; i += 997) {
                ASSERT_EQ(v[i], sum_at(i)) << algorithm_name(a) << " " << count << " at " << i;
              }
              // The last element too: a short final segment.
              ASSERT_EQ(v[count - 1], sum_at(count - 1)) << algorithm_name(a) << " " << count;
            }
          }
        });
      }
    }
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
