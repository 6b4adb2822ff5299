// A rank that gives up tells its peers why, and the reason must reach them
// even when the connection to them is full of collective data: the peer then
// names the rank that was really lost, not the one relaying it (issue 6).
// Two ranks as Pairs over one connection, the relaying side mid-frame.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "transport/host/pair.h"
#include "transport/host/transport.h"
#include "transport/shm/segment.h"
#include "transport/shm/stream.h"
#include "transport/tcp/socket_stream.h"
#include "transport/wire.h"

namespace pytfcomm {
namespace {

using host::Pair;

constexpr char kReason[] = "lost rank 7 (10.1.2.3:4567) during allreduce #3: it crashed";

transport::MessageMeta meta() {
  transport::MessageMeta m;
  m.seq = 3;
  m.count = 1;
  return m;
}

// Two Pairs facing each other through one segment with two tiny rings
// (`a` relays, `b` is told; a Pair is named after its peer).
struct ShmPairs {
  shm::OwnedSegment seg{2, 4096};
  std::unique_ptr<Pair> a, b;
  ShmPairs() {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    auto m = seg.mapping();
    auto ring = [&](size_t i) {
      char* ctl = m->base() + shm::ring_offset(i, 4096);
      return shm::RingView{m, reinterpret_cast<shm::RingCtl*>(ctl), ctl + shm::kRingCtlBytes, 4096};
    };
    shm::Doorbell bell(m->header());
    a = std::make_unique<Pair>(0,
                               std::make_unique<shm::ShmStream>(ring(1), ring(0), bell,
                                                                net::Fd(sv[0]), shm::ByReference{}),
                               "rank 0 (b)", 1 << 30);
    b = std::make_unique<Pair>(1,
                               std::make_unique<shm::ShmStream>(ring(0), ring(1), bell,
                                                                net::Fd(sv[1]), shm::ByReference{}),
                               "rank 1 (a)", 1 << 30);
    seg.unlink();
  }
};

// A connected pair of loopback TCP sockets with small buffers, so that one
// large frame fills them.
std::pair<int, int> tcp_socket_pair() {
  int small = 64 << 10;
  int lst = ::socket(AF_INET, SOCK_STREAM, 0);
  ::setsockopt(lst, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(lst, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(lst, reinterpret_cast<sockaddr*>(&addr), &len);
  EXPECT_EQ(::listen(lst, 1), 0);
  int c = ::socket(AF_INET, SOCK_STREAM, 0);
  ::setsockopt(c, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
  ::setsockopt(c, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  EXPECT_EQ(::connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  int s = ::accept(lst, nullptr, nullptr);
  ::close(lst);
  ::setsockopt(s, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
  net::set_nonblocking(c);
  net::set_nonblocking(s);
  return {c, s};
}

struct TcpPairs {
  std::unique_ptr<Pair> a, b;
  TcpPairs() {
    auto [x, y] = tcp_socket_pair();
    a = std::make_unique<Pair>(0, std::make_unique<tcp::SocketStream>(net::Fd(x)), "rank 0 (b)",
                               1 << 30);
    b = std::make_unique<Pair>(1, std::make_unique<tcp::SocketStream>(net::Fd(y)), "rank 1 (a)",
                               1 << 30);
  }
};

// What `b` raises while it waits like a rank does: progress its posted
// receive, then look at the idle connection, until something throws.
std::string what_b_raises(Pair& b, std::vector<char>& into, ErrorKind* kind) {
  b.post_recv(into.data(), into.size(), meta());
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  try {
    while (std::chrono::steady_clock::now() < end) {
      b.on_liveness_event();
      b.progress("allreduce #3");
      if (b.recv_done(0)) b.check_idle("allreduce #3");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  } catch (const Error& e) {
    *kind = e.kind();
    return e.what();
  }
  return "nothing raised";
}

// `a` has started a frame that does not fit in the connection when it gives
// up. Before the fix the reason was dropped ("closed in the middle of a
// message") and `b` named `a` as the lost rank.
TEST(AbortRelay, ShmReasonArrivesPastAFullRing) {
  ShmPairs p;
  std::vector<char> big(64 << 10, 'x'), got(big.size());
  p.a->post_send(big.data(), big.size(), meta());
  p.a->progress("allreduce #3");
  ASSERT_FALSE(p.a->send_done(0));  // the ring is full, the frame half-written
  p.a->abort(kReason);
  ErrorKind kind{};
  std::string err = what_b_raises(*p.b, got, &kind);
  EXPECT_EQ(kind, ErrorKind::kPeerLost) << err;
  EXPECT_NE(err.find("rank 1 (a) aborted"), std::string::npos) << err;
  EXPECT_NE(err.find(kReason), std::string::npos) << err;
}

TEST(AbortRelay, TcpReasonArrivesPastAFullSocket) {
  TcpPairs p;
  std::vector<char> big(8 << 20, 'x'), got(big.size());
  p.a->post_send(big.data(), big.size(), meta());
  p.a->progress("allreduce #3");
  ASSERT_FALSE(p.a->send_done(0));  // both socket buffers full, the frame half-written
  std::string err;
  ErrorKind kind{};
  std::thread reader([&] { err = what_b_raises(*p.b, got, &kind); });
  p.a->abort(kReason);
  reader.join();
  EXPECT_EQ(kind, ErrorKind::kPeerLost) << err;
  EXPECT_NE(err.find("rank 1 (a) aborted"), std::string::npos) << err;
  EXPECT_NE(err.find(kReason), std::string::npos) << err;
}

// `a` gave up at a frame boundary behind a frame `b` never asked for; `b`
// only has a send to `a`, which fails once `a` has closed. `b` must skip the
// unasked-for frame and find the reason behind it.
TEST(AbortRelay, TcpReasonBehindAnUnreadFrameIsFoundWhenASendFails) {
  TcpPairs p;
  std::vector<char> small(1000, 'y'), out(1 << 20, 'z');
  p.a->post_send(small.data(), small.size(), meta());
  p.a->progress("allreduce #3");
  ASSERT_TRUE(p.a->send_done(0));
  p.a->abort(kReason);
  p.b->post_send(out.data(), out.size(), meta());
  std::string err = "nothing raised";
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  try {
    while (std::chrono::steady_clock::now() < end) {
      p.b->progress("allreduce #3");  // no receive posted: only the send moves
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("rank 1 (a) aborted"), std::string::npos) << err;
  EXPECT_NE(err.find(kReason), std::string::npos) << err;
}

// A peer that gave up at its deadline makes this rank raise a timeout too.
TEST(AbortRelay, TimeoutKeepsItsClassOnBothStreams) {
  std::vector<char> got(100);
  ShmPairs s;
  s.a->abort("timed out waiting for rank 7", wire::kAbortTimeout);
  ErrorKind kind{};
  std::string err = what_b_raises(*s.b, got, &kind);
  EXPECT_EQ(kind, ErrorKind::kTimeout) << err;
  EXPECT_NE(err.find("rank 7"), std::string::npos) << err;
  TcpPairs t;
  t.a->abort("timed out waiting for rank 7", wire::kAbortTimeout);
  err = what_b_raises(*t.b, got, &kind);
  EXPECT_EQ(kind, ErrorKind::kTimeout) << err;
  EXPECT_NE(err.find("rank 7"), std::string::npos) << err;
}

// The note lives in memory the peer's process writes: an impossible length
// or unknown flags make it no note at all, never a read past its end.
TEST(AbortRelay, MalformedNoteIsIgnored) {
  ShmPairs s;
  auto* ctl = reinterpret_cast<shm::RingCtl*>(s.seg.mapping()->base() + shm::ring_offset(0, 4096));
  ctl->note.bytes = shm::kNoteBytes + 1;
  ctl->note.published.store(1);
  s.b->check_idle("allreduce #3");  // nothing to raise: the note is ignored
  ctl->note.bytes = 5;
  ctl->note.flags = 0x80;
  s.b->check_idle("allreduce #3");
  ctl->note.flags = 0;
  const char text[5] = {'a', 1, 'b', 2, 'c'};  // control characters are masked
  std::memcpy(ctl->note.text, text, sizeof(text));
  try {
    s.b->check_idle("allreduce #3");
    ADD_FAILURE() << "a well-formed note must raise";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a?b?c"), std::string::npos) << e.what();
  }
}

// Two ranks' transports over one loopback connection, negotiating in frames.
std::unique_ptr<host::HostTransport> tcp_transport(int rank, int fd) {
  std::vector<net::PeerInfo> peers{{0, "127.0.0.1", 1, "a"}, {1, "127.0.0.1", 2, "b"}};
  std::vector<host::PeerLink> links(2);
  links[static_cast<size_t>(1 - rank)].stream = std::make_unique<tcp::SocketStream>(net::Fd(fd));
  auto t = std::make_unique<host::HostTransport>(rank, peers, std::move(links), nullptr, nullptr,
                                                 host::WaitPolicy{});
  t->prepare_inbox(64);
  t->configure_rounds(0, 1, 64);
  t->set_deadline(deadline_after(10));
  t->set_context("barrier #0");
  return t;
}

void publish(host::HostTransport& t, uint64_t round) {
  t.round_arm(round);
  std::memset(t.round_outbox(), 'A' + t.rank(), 8);
  t.round_publish(8);
}

// Rank 1 published its record and was descheduled; rank 0 finished the round
// and then gave up (on a later collective), so its record and its ABORT frame
// wait together in rank 1's socket. The round every other rank finished must
// finish on rank 1 too, with rank 0's record; the next round raises rank 0's
// reason. Before, the read that took the record took the ABORT frame behind
// it, and rank 1 raised in the round it could finish.
TEST(LastWords, TcpRoundFinishedBeforeThePeerGaveUpCompletes) {
  auto [x, y] = tcp_socket_pair();
  auto t0 = tcp_transport(0, x);
  auto t1 = tcp_transport(1, y);
  publish(*t1, 1);
  publish(*t0, 1);
  t0->wait_for([&] { return t0->round_complete(); }, TimePoint::max());
  t0->abort(kReason, ErrorKind::kPeerLost);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // all of it in rank 1's kernel
  t1->wait_for([&] { return t1->round_complete(); }, TimePoint::max());
  size_t bytes = 0;
  const char* rec = t1->round_record(0, &bytes);
  ASSERT_EQ(bytes, 8u);
  EXPECT_EQ(std::string(rec, 8), std::string(8, 'A'));
  publish(*t1, 2);
  try {
    t1->wait_for([&] { return t1->round_complete(); }, TimePoint::max());
    ADD_FAILURE() << "rank 0 gave up: the next round must raise";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kPeerLost) << e.what();
    EXPECT_NE(std::string(e.what()).find(kReason), std::string::npos) << e.what();
  }
}

// The pair keeps a peer's last words once read: an ABORT frame is read only
// once, yet every later look at the pair must raise its reason, not "lost".
TEST(LastWords, APairRepeatsWordsItHeardOnce) {
  TcpPairs p;
  p.a->abort(kReason);
  std::vector<char> got(100);
  ErrorKind kind{};
  std::string first = what_b_raises(*p.b, got, &kind);
  EXPECT_NE(first.find(kReason), std::string::npos) << first;
  for (int i = 0; i < 2; ++i) {
    try {
      p.b->check_alive("allreduce #4");
      ADD_FAILURE() << "the words were heard: check_alive must raise them";
    } catch (const host::PeerLastWords& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kPeerLost);
      EXPECT_NE(std::string(e.what()).find(kReason), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("allreduce #4"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace pytfcomm
