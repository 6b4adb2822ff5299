// The shared-memory byte stream on its own (wrap-around, peeks, the abort
// note beside a full ring, a dead or misbehaving peer), then whole
// communicators with each transport forced, ranks as threads.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "engine/communicator.h"
#include "test_util.h"
#include "transport/shm/segment.h"
#include "transport/shm/stream.h"
#include "transport/wire.h"

namespace pytfcomm {
namespace {

using shm::RingView;

// Two streams facing each other through one segment with two tiny rings.
struct Loop {
  shm::OwnedSegment seg{2, 4096};
  std::unique_ptr<shm::ShmStream> a, b;  // a writes ring 0, b writes ring 1
  Loop() {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    auto m = seg.mapping();
    auto ring = [&](size_t i) {
      char* ctl = m->base() + shm::ring_offset(i, 4096);
      return RingView{m, reinterpret_cast<shm::RingCtl*>(ctl), ctl + shm::kRingCtlBytes, 4096};
    };
    shm::Doorbell bell(m->header());
    a = std::make_unique<shm::ShmStream>(ring(1), ring(0), bell, net::Fd(sv[0]),
                                         shm::ByReference{});
    b = std::make_unique<shm::ShmStream>(ring(0), ring(1), bell, net::Fd(sv[1]),
                                         shm::ByReference{});
    seg.unlink();
  }
};

TEST(ShmStream, BytesArriveInOrderAcrossManyWraps) {
  Loop l;
  std::mt19937 rng(7);
  std::vector<uint8_t> sent, got;
  std::vector<uint8_t> buf(3000);
  uint8_t next = 0;
  while (got.size() < 200000) {
    size_t n = rng() % 3000 + 1;
    for (size_t i = 0; i < n; ++i) buf[i] = next++;
    size_t half = n / 2;
    iovec iov[2] = {{buf.data(), half}, {buf.data() + half, n - half}};
    ssize_t w = l.a->writev_some(iov, 2);
    if (w > 0) {
      sent.insert(sent.end(), buf.begin(), buf.begin() + w);
      next = static_cast<uint8_t>(sent.back() + 1);
    } else {
      ASSERT_EQ(errno, EAGAIN);
      next = sent.empty() ? 0 : static_cast<uint8_t>(sent.back() + 1);
    }
    uint8_t peek[8];
    // A peek sees the start of a record, or says "not now".
    ssize_t p = l.b->peek(peek, sizeof(peek));
    if (p == 8) {
      ASSERT_EQ(peek[0], sent[got.size()]);
    } else {
      ASSERT_EQ(p, -1);
      ASSERT_EQ(errno, EAGAIN);
    }
    std::vector<uint8_t> in(rng() % 5000 + 1);
    ssize_t r = l.b->read_some(in.data(), in.size());
    if (r > 0) got.insert(got.end(), in.begin(), in.begin() + r);
  }
  ASSERT_LE(got.size(), sent.size());
  EXPECT_TRUE(std::equal(got.begin(), got.end(), sent.begin()));
}

TEST(ShmStream, FullRingWouldBlockButTheAbortNoteGetsThrough) {
  Loop l;
  std::vector<char> big(5000, 'x');
  iovec iov{big.data(), big.size()};
  EXPECT_EQ(l.a->writev_some(&iov, 1), 4096 - 8);  // fills the ring (8: the record tag)
  EXPECT_EQ(l.a->writev_some(&iov, 1), -1);
  EXPECT_EQ(errno, EAGAIN);
  std::string note;
  uint32_t flags = 0;
  EXPECT_FALSE(l.b->peer_note(&note, &flags));
  EXPECT_TRUE(l.a->leave_note("lost rank 7", 11, wire::kAbortTimeout));
  EXPECT_TRUE(l.a->leave_note("second words", 12, 0));  // only the first one counts
  ASSERT_TRUE(l.b->peer_note(&note, &flags));
  EXPECT_EQ(note, "lost rank 7");
  EXPECT_EQ(flags, uint32_t{wire::kAbortTimeout});
  std::vector<char> out(4096);
  EXPECT_EQ(l.b->read_some(out.data(), out.size()), 4096 - 8);  // the data is untouched
}

TEST(ShmStream, DeadPeerReadsAsEofOnceDrained) {
  Loop l;
  char msg[10] = "hello";
  iovec iov{msg, sizeof(msg)};
  EXPECT_EQ(l.a->writev_some(&iov, 1), 10);
  l.a->close();              // closes its end of the liveness socket
  l.b->on_liveness_event();  // what epoll would report
  char out[16];
  EXPECT_EQ(l.b->read_some(out, sizeof(out)), 10);  // what it sent before going
  EXPECT_EQ(l.b->read_some(out, sizeof(out)), 0);
  EXPECT_EQ(l.b->writev_some(&iov, 1), -1);
  EXPECT_EQ(errno, EPIPE);
}

// Two streams of this process that may read each other's memory: collectives
// of 2 KiB or more lend their large pieces.
struct RefLoop {
  Loop l;
  std::unique_ptr<shm::ShmStream> a, b;
  RefLoop() {
    shm::ByReference self{::getpid(), 2 * 1024};  // this process reads its own memory
    auto m = l.seg.mapping();
    auto ring = [&](size_t i) {
      char* ctl = m->base() + shm::ring_offset(i, 4096);
      return RingView{m, reinterpret_cast<shm::RingCtl*>(ctl), ctl + shm::kRingCtlBytes, 4096};
    };
    shm::Doorbell bell(m->header());
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    a = std::make_unique<shm::ShmStream>(ring(1), ring(0), bell, net::Fd(sv[0]), self);
    b = std::make_unique<shm::ShmStream>(ring(0), ring(1), bell, net::Fd(sv[1]), self);
  }
};

TEST(ShmStream, LargePayloadsTravelByReferenceAndAreReleasedWhenRead) {
  RefLoop rl;
  shm::ShmStream& a = *rl.a;
  shm::ShmStream& b = *rl.b;
  std::vector<uint32_t> big(100000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint32_t>(i * 2654435761u);
  char head[40] = "header bytes go inline";
  iovec iov[2] = {{head, sizeof(head)}, {big.data(), big.size() * 4}};
  a.set_collective_bytes(2 * 1024);  // exactly the threshold
  ASSERT_EQ(a.writev_some(iov, 2), static_cast<ssize_t>(sizeof(head) + big.size() * 4));
  EXPECT_EQ(a.release_ticket(), big.size() * 4);
  EXPECT_EQ(a.released(), 0u);
  char h[40];
  ASSERT_EQ(b.read_some(h, sizeof(h)), 40);
  EXPECT_STREQ(h, head);
  std::vector<uint32_t> got(big.size());
  size_t done = 0;
  while (done < got.size() * 4) {
    ssize_t r = b.read_some(reinterpret_cast<char*>(got.data()) + done,
                            std::min<size_t>(70000, got.size() * 4 - done));
    ASSERT_GT(r, 0);
    done += static_cast<size_t>(r);
  }
  EXPECT_EQ(got, big);
  EXPECT_EQ(a.released(), big.size() * 4);
}

TEST(ShmStream, SmallCollectivesAndSmallPiecesAreCopiedThroughTheRing) {
  RefLoop rl;
  std::vector<char> big(shm::kMinByReference * 2, 'b');
  iovec iov{big.data(), big.size()};
  // Below the threshold: copied, as much as the 4 KiB ring holds.
  rl.a->set_collective_bytes(2 * 1024 - 1);
  EXPECT_EQ(rl.a->writev_some(&iov, 1), 4096 - 8);
  EXPECT_EQ(rl.a->release_ticket(), 0u);
  std::vector<char> out(4096);
  EXPECT_EQ(rl.b->read_some(out.data(), out.size()), 4096 - 8);
  // A large collective, but a piece under kMinByReference: copied too.
  rl.a->set_collective_bytes(uint64_t{1} << 30);
  iovec piece{big.data(), shm::kMinByReference - 1};
  EXPECT_EQ(rl.a->writev_some(&piece, 1), 4096 - 8);
  EXPECT_EQ(rl.a->release_ticket(), 0u);
  EXPECT_EQ(rl.b->read_some(out.data(), out.size()), 4096 - 8);
  // The same collective's piece of kMinByReference goes by reference.
  iovec whole{big.data(), shm::kMinByReference};
  EXPECT_EQ(rl.a->writev_some(&whole, 1), static_cast<ssize_t>(shm::kMinByReference));
  EXPECT_EQ(rl.a->release_ticket(), shm::kMinByReference);
}

TEST(ShmStream, ImpossibleCountersAreAnErrorNotAnOverrun) {
  Loop l;
  auto m = l.seg.mapping();
  auto* ctl = reinterpret_cast<shm::RingCtl*>(m->base() + shm::ring_offset(0, 4096));
  ctl->head.store(1 << 20);  // a peer claiming more bytes than the ring holds
  char out[16];
  EXPECT_EQ(l.b->read_some(out, sizeof(out)), -1);
  EXPECT_EQ(errno, EPROTO);
}

using testing_util::free_port;

class TransportTest : public ::testing::TestWithParam<std::string> {
 protected:
  // Runs body(comm, rank) on 3 ranks as threads of one host, over the
  // parameter's transport; every rank must finish without an exception.
  void on_one_host(const std::function<void(Communicator&, int)>& body) {
    const int n = 3;
    int port = free_port();
    auto errors = testing_util::on_threads(n, [&](int r) {
      CommOptions o = testing_util::loopback_options(r, n, port);
      o.host_id = "one-host";
      o.transport = GetParam();
      Communicator comm(o);
      body(comm, r);
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  }
};

// Pipelined ring and recursive doubling with small segments over a small
// ring, so that the rings wrap and fill many times.
TEST_P(TransportTest, AllreduceIsExactOnEveryRank) {
  setenv("PYTFCOMM_SEGMENT_BYTES", "4096", 0);
  const size_t count = 300007;
  on_one_host([&](Communicator& comm, int r) {
    std::vector<int64_t> x(count);
    for (size_t i = 0; i < count; ++i) x[i] = static_cast<int64_t>(i) * (r + 1);
    for (Algorithm a : {Algorithm::kRing, Algorithm::kRecursiveDoubling}) {
      std::vector<int64_t> y(count, -1);
      comm.allreduce(x.data(), y.data(), count, DType::kInt64, ReduceOp::kSum, a, 0);
      for (size_t i = 0; i < count; ++i) {
        if (y[i] != static_cast<int64_t>(i) * 6) throw std::runtime_error("wrong sum");
      }
    }
  });
}

// Large enough per rank (5.3 MiB) for shared memory to lend its pieces by
// reference (PYTFCOMM_SHM_BYREF_BYTES, default 2 MiB); in place as well.
TEST_P(TransportTest, LargeAllreduceIsExactOnEveryRank) {
  setenv("PYTFCOMM_SEGMENT_BYTES", "65536", 1);
  const size_t count = size_t{1} << 21;
  on_one_host([&](Communicator& comm, int r) {
    std::vector<int64_t> x(count);
    for (int rep = 0; rep < 2; ++rep) {
      for (size_t i = 0; i < count; ++i) x[i] = static_cast<int64_t>(i) * (r + 1) + rep;
      std::vector<int64_t> y(count, -1);
      int64_t* out = rep == 0 ? y.data() : x.data();
      comm.allreduce(x.data(), out, count, DType::kInt64, ReduceOp::kSum, Algorithm::kRing, 0);
      for (size_t i = 0; i < count; ++i) {
        if (out[i] != static_cast<int64_t>(i) * 6 + 3 * rep) throw std::runtime_error("wrong sum");
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Shm, TransportTest, ::testing::Values("tcp", "shm", "auto"));

}  // namespace
}  // namespace pytfcomm
