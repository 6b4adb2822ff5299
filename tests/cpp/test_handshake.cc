// The connection handshake: the acceptor's state machine fed byte by byte,
// then real sockets with honest ranks, wrong secrets, garbage, replays and
// stalled clients, then whole communicators with a job secret.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "engine/communicator.h"
#include "test_util.h"
#include "transport/tcp/handshake.h"
#include "transport/wire_check.h"

namespace pytfcomm::tcp {
namespace {

using State = AcceptorSession::State;
const std::string kSecret = "0123456789abcdef-test-secret";

template <typename T>
void feed(AcceptorSession& s, const T& msg, size_t step = sizeof(T)) {
  auto* p = reinterpret_cast<const uint8_t*>(&msg);
  for (size_t off = 0; off < sizeof(T); off += step)
    s.consume(p + off, std::min(step, sizeof(T) - off));
}

template <typename T>
T take(AcceptorSession& s) {
  T out{};
  EXPECT_EQ(s.outbox().size(), sizeof(T));
  std::memcpy(&out, s.outbox().data(), std::min(sizeof(T), s.outbox().size()));
  s.outbox().clear();
  return out;
}

wire::Hello hello(bool auth) {
  return make_hello(wire::HelloPurpose::kData, 3, 4, 0, "127.0.0.1", "h", auth);
}

wire::Proof proof_for(const std::string& secret, const wire::Hello& h, const wire::Challenge& c) {
  wire::Proof p{};
  p.magic = wire::kProofMagic;
  Digest d = wire::handshake_mac(secret, wire::Role::kConnector, h, c);
  std::memcpy(p.mac, d.data(), d.size());
  return p;
}

TEST(AcceptorSession, HonestConnectorByteByByte) {
  AuthConfig auth{kSecret, 1};
  AcceptorSession s(auth);
  wire::Hello h = hello(true);
  feed(s, h, 1);
  ASSERT_EQ(s.state(), State::kProof) << s.error();
  auto ch = take<wire::Challenge>(s);
  EXPECT_EQ(wire::check_challenge(ch, 1, true), "");
  feed(s, proof_for(kSecret, h, ch), 3);
  ASSERT_EQ(s.state(), State::kDone) << s.error();
  auto confirm = take<wire::Confirm>(s);
  EXPECT_EQ(wire::check_confirm(confirm), "");
  EXPECT_TRUE(wire::verify_mac(kSecret, wire::Role::kAcceptor, h, ch, confirm.mac));
  EXPECT_EQ(s.wanted(), 0u);  // reads nothing past the handshake
}

TEST(AcceptorSession, WrongSecretIsRefusedAndLearnsNoMac) {
  AuthConfig auth{kSecret, 1};
  AcceptorSession s(auth);
  wire::Hello h = hello(true);
  feed(s, h);
  auto ch = take<wire::Challenge>(s);
  feed(s, proof_for("another-secret-entirely", h, ch));
  EXPECT_EQ(s.state(), State::kFailed);
  EXPECT_NE(s.error().find("PYTFCOMM_SECRET"), std::string::npos);
  auto confirm = take<wire::Confirm>(s);
  EXPECT_EQ(confirm.status, static_cast<uint32_t>(wire::HandshakeStatus::kBadProof));
  for (uint8_t b : confirm.mac) EXPECT_EQ(b, 0);
}

TEST(AcceptorSession, ReplayedTranscriptFailsOnANewConnection) {
  AuthConfig auth{kSecret, 1};
  wire::Hello h = hello(true);
  AcceptorSession first(auth);
  feed(first, h);
  auto ch = take<wire::Challenge>(first);
  wire::Proof recorded = proof_for(kSecret, h, ch);
  feed(first, recorded);
  ASSERT_EQ(first.state(), State::kDone);
  // An eavesdropper replays the very same bytes: the acceptor's fresh nonce
  // makes the old proof worthless.
  AcceptorSession second(auth);
  feed(second, h);
  ASSERT_EQ(second.state(), State::kProof);
  feed(second, recorded);
  EXPECT_EQ(second.state(), State::kFailed);
}

TEST(AcceptorSession, SecretPresenceMustAgree) {
  AuthConfig with{kSecret, 0}, without{"", 0};
  AcceptorSession a(with);
  feed(a, hello(false));
  EXPECT_EQ(a.state(), State::kFailed);
  EXPECT_EQ(take<wire::Challenge>(a).status,
            static_cast<uint32_t>(wire::HandshakeStatus::kSecretRequired));
  AcceptorSession b(without);
  feed(b, hello(true));
  EXPECT_EQ(b.state(), State::kFailed);
  EXPECT_EQ(take<wire::Challenge>(b).status,
            static_cast<uint32_t>(wire::HandshakeStatus::kSecretUnexpected));
}

TEST(AcceptorSession, NoSecretStillChecksMagicAndProof) {
  AuthConfig auth{"", 0};
  AcceptorSession s(auth);
  wire::Hello h = hello(false);
  feed(s, h);
  auto ch = take<wire::Challenge>(s);
  wire::Proof p{};
  p.magic = 12;
  feed(s, p);
  EXPECT_EQ(s.state(), State::kFailed);
  AcceptorSession ok(auth);
  feed(ok, h);
  ch = take<wire::Challenge>(ok);
  p.magic = wire::kProofMagic;
  feed(ok, p);
  EXPECT_EQ(ok.state(), State::kDone);
}

TEST(AcceptorSession, BadMagicFailsAfterEightBytes) {
  AuthConfig auth{"", 0};
  AcceptorSession s(auth);
  const char junk[] = "GET / HTTP/1.1\r\n";
  s.consume(reinterpret_cast<const uint8_t*>(junk), 8);
  EXPECT_EQ(s.state(), State::kFailed);
  EXPECT_EQ(s.wanted(), 0u);
}

// ---- over real sockets -----------------------------------------------------

int connect_to(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

TEST(AcceptPeers, HonestPeersGetThroughWhileStrangersAreDropped) {
  net::SockAddr bound;
  net::Fd listener = net::listen_on("127.0.0.1", 0, &bound);
  AuthConfig auth{kSecret, 0};
  auto accepted = std::async(std::launch::async, [&] {
    return accept_peers(
        listener.get(), 2, auth,
        [](const wire::Hello&, const net::SockAddr&) { return std::string(); }, deadline_after(20),
        "the test listener");
  });
  // Strangers first: garbage, a stalled half hello, a wrong secret, a replay.
  net::Fd garbage(connect_to(bound.port()));
  std::string junk(600, '\x7f');
  ASSERT_GT(::send(garbage.get(), junk.data(), junk.size(), MSG_NOSIGNAL), 0);
  net::Fd stalled(connect_to(bound.port()));
  wire::Hello half = hello(true);
  ASSERT_EQ(::send(stalled.get(), &half, 100, MSG_NOSIGNAL), 100);
  net::Fd wrong(connect_to(bound.port()));
  AuthConfig bad{"not-the-job-secret!", 3};
  EXPECT_THROW(connect_handshake(wrong.get(), hello(true), bad, 0, deadline_after(5), "acceptor"),
               Error);
  // An honest peer, whose bytes are recorded and replayed on a new connection.
  net::Fd honest(connect_to(bound.port()));
  AuthConfig good{kSecret, 3};
  wire::Hello h = hello(true);
  connect_handshake(honest.get(), h, good, 0, deadline_after(5), "acceptor");
  net::Fd replay(connect_to(bound.port()));
  ASSERT_EQ(::send(replay.get(), &h, sizeof(h), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(h)));
  wire::Challenge fresh{};
  ASSERT_EQ(::recv(replay.get(), &fresh, sizeof(fresh), MSG_WAITALL),
            static_cast<ssize_t>(sizeof(fresh)));
  wire::Challenge old = fresh;
  old.nonce[0] ^= 0xff;  // the challenge the recorded proof answered
  wire::Proof stale = proof_for(kSecret, h, old);
  ASSERT_EQ(::send(replay.get(), &stale, sizeof(stale), MSG_NOSIGNAL),
            static_cast<ssize_t>(sizeof(stale)));
  wire::Confirm refused{};
  ASSERT_EQ(::recv(replay.get(), &refused, sizeof(refused), MSG_WAITALL),
            static_cast<ssize_t>(sizeof(refused)));
  EXPECT_EQ(refused.status, static_cast<uint32_t>(wire::HandshakeStatus::kBadProof));
  // A second honest peer completes the accept; the stalled client is ignored.
  net::Fd honest2(connect_to(bound.port()));
  connect_handshake(honest2.get(), make_hello(wire::HelloPurpose::kData, 2, 4, 0, "x", "h", true),
                    good, 0, deadline_after(5), "acceptor");
  auto peers = accepted.get();
  ASSERT_EQ(peers.size(), 2u);
  EXPECT_EQ(peers[0].hello.rank, 3);
  EXPECT_EQ(peers[1].hello.rank, 2);
}

TEST(AcceptPeers, WrongSecretConnectorRaisesAuthError) {
  net::SockAddr bound;
  net::Fd listener = net::listen_on("127.0.0.1", 0, &bound);
  AuthConfig auth{kSecret, 0};
  auto accepted = std::async(std::launch::async, [&] {
    try {
      accept_peers(
          listener.get(), 1, auth,
          [](const wire::Hello&, const net::SockAddr&) { return std::string(); }, deadline_after(1),
          "the test listener");
    } catch (const Error& e) {
      return e.kind();
    }
    return ErrorKind::kInternal;
  });
  net::Fd fd(connect_to(bound.port()));
  AuthConfig bad{"not-the-job-secret!", 1};
  try {
    connect_handshake(fd.get(), hello(true), bad, 0, deadline_after(5), "rank 0");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kAuth) << e.what();
    EXPECT_NE(std::string(e.what()).find("PYTFCOMM_SECRET"), std::string::npos) << e.what();
  }
  EXPECT_EQ(accepted.get(), ErrorKind::kTimeout);  // the acceptor kept waiting
}

// ---- whole communicators -----------------------------------------------------

using testing_util::free_port;

// Runs one allreduce on n rank threads with the given secrets; returns each
// rank's error kind (kInternal standing for "no error").
std::vector<ErrorKind> run_job(const std::vector<std::string>& secrets, double connect_s) {
  int n = static_cast<int>(secrets.size());
  int port = free_port();
  std::vector<ErrorKind> kinds(n, ErrorKind::kInternal);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        CommOptions o = testing_util::loopback_options(r, n, port);
        o.connect_timeout_s = connect_s;
        o.secret = secrets[r];
        Communicator comm(o);
        std::vector<float> x(1000, 1.0f), y(1000);
        comm.allreduce(x.data(), y.data(), x.size(), DType::kFloat32, ReduceOp::kSum,
                       Algorithm::kRing, 30);
        if (y[999] != static_cast<float>(n)) kinds[r] = ErrorKind::kMismatch;
      } catch (const Error& e) {
        kinds[r] = e.kind();
      }
    });
  }
  for (auto& t : threads) t.join();
  return kinds;
}

TEST(CommunicatorSecret, JobWithOneSecretRuns) {
  auto kinds = run_job({kSecret, kSecret, kSecret, kSecret}, 30);
  for (auto k : kinds) EXPECT_EQ(k, ErrorKind::kInternal);
}

TEST(CommunicatorSecret, RankWithAnotherSecretIsRefused) {
  auto kinds = run_job({kSecret, "a-different-secret-value", kSecret}, 2);
  EXPECT_EQ(kinds[1], ErrorKind::kAuth);
  // The others never complete the job without rank 1: they time out.
  EXPECT_EQ(kinds[0], ErrorKind::kTimeout);
}

TEST(CommunicatorSecret, RankWithoutSecretIsRefused) {
  auto kinds = run_job({kSecret, ""}, 2);
  EXPECT_EQ(kinds[1], ErrorKind::kAuth);
  EXPECT_EQ(kinds[0], ErrorKind::kTimeout);
}

}  // namespace
}  // namespace pytfcomm::tcp
