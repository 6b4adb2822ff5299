// The pure validators every received byte goes through (transport/wire_check).
#include <gtest/gtest.h>

#include <cstring>

#include "transport/tcp/handshake.h"
#include "transport/wire_check.h"

namespace pytfcomm::wire {
namespace {

Hello good_hello() {
  return tcp::make_hello(HelloPurpose::kData, 2, 4, 1234, "127.0.0.1", "host", true);
}

TEST(CheckHello, AcceptsAWellFormedHello) { EXPECT_EQ(check_hello(good_hello()), ""); }

TEST(CheckHello, RejectsEachBadField) {
  struct Case {
    const char* name;
    void (*mutate)(Hello&);
    const char* words;
  };
  const Case cases[] = {
      {"magic", [](Hello& h) { h.magic ^= 1; }, "magic"},
      {"version", [](Hello& h) { h.version = 99; }, "protocol version"},
      {"purpose", [](Hello& h) { h.purpose = 7; }, "purpose"},
      {"host", [](Hello& h) { std::memset(h.listen_host, 'x', kMaxHost); }, "unterminated"},
      {"host_id", [](Hello& h) { std::memset(h.host_id, 'x', kMaxHostId); }, "unterminated"},
      {"size", [](Hello& h) { h.size = 0; }, "impossible rank"},
      {"negative rank", [](Hello& h) { h.rank = -1; }, "impossible rank"},
      {"rank >= size", [](Hello& h) { h.rank = h.size; }, "impossible rank"},
      {"port", [](Hello& h) { h.listen_port = 70000; }, "port"},
      {"flags", [](Hello& h) { h.flags = 0x80; }, "flags"},
  };
  for (const auto& c : cases) {
    Hello h = good_hello();
    c.mutate(h);
    std::string why = check_hello(h);
    EXPECT_NE(why.find(c.words), std::string::npos) << c.name << ": " << why;
  }
}

TEST(CheckChallenge, StatusRankAndFlags) {
  Challenge c{};
  c.magic = kChallengeMagic;
  c.rank = 3;
  c.flags = kFlagAuth;
  EXPECT_EQ(check_challenge(c, 3, true), "");
  EXPECT_NE(check_challenge(c, 2, true).find("not rank 2"), std::string::npos);
  EXPECT_NE(check_challenge(c, 3, false).find("PYTFCOMM_SECRET"), std::string::npos);
  c.status = static_cast<uint32_t>(HandshakeStatus::kSecretRequired);
  EXPECT_NE(check_challenge(c, 3, false).find("requires a job secret"), std::string::npos);
  c.status = static_cast<uint32_t>(HandshakeStatus::kSecretUnexpected);
  EXPECT_NE(check_challenge(c, 3, true).find("without a job secret"), std::string::npos);
  c.status = 12345;
  EXPECT_NE(check_challenge(c, 3, true).find("unknown"), std::string::npos);
  c.magic = 0;
  EXPECT_NE(check_challenge(c, 3, true).find("not pytfcomm"), std::string::npos);
}

TEST(CheckConfirm, OkBadProofAndGarbage) {
  Confirm c{};
  c.magic = kConfirmMagic;
  EXPECT_EQ(check_confirm(c), "");
  c.status = static_cast<uint32_t>(HandshakeStatus::kBadProof);
  EXPECT_NE(check_confirm(c).find("PYTFCOMM_SECRET"), std::string::npos);
  c.magic = 1;
  EXPECT_NE(check_confirm(c).find("not pytfcomm"), std::string::npos);
}

TEST(CheckJoinReply, SizeAndMagic) {
  JoinReply r{};
  r.magic = kHelloMagic;
  r.size = 4;
  EXPECT_EQ(check_join_reply(r, 4), "");
  EXPECT_NE(check_join_reply(r, 3).find("size 4"), std::string::npos);
  r.size = -1;  // a hostile size never reaches an allocation
  EXPECT_NE(check_join_reply(r, 3), "");
  r.magic = 0;
  EXPECT_NE(check_join_reply(r, 4).find("not pytfcomm"), std::string::npos);
}

TEST(CheckPeerEntry, RankStringsPort) {
  PeerEntry e{};
  e.rank = 1;
  e.port = 80;
  EXPECT_EQ(check_peer_entry(e, 1), "");
  EXPECT_NE(check_peer_entry(e, 2), "");
  e.port = 1 << 20;
  EXPECT_NE(check_peer_entry(e, 1).find("port"), std::string::npos);
  e.port = 80;
  std::memset(e.host, 'h', kMaxHost);
  EXPECT_NE(check_peer_entry(e, 1).find("unterminated"), std::string::npos);
}

TEST(CheckFrame, EveryVerdict) {
  transport::MessageMeta want;
  want.seq = 5;
  want.count = 10;
  want.shape_tag = 0xabcd;
  FrameHeader h{};
  h.magic = kDataMagic;
  h.nbytes = 40;
  h.meta = want;
  EXPECT_EQ(check_frame(h, want, 40, 1 << 20), FrameVerdict::kOk);
  EXPECT_EQ(check_frame(h, want, 44, 1 << 20), FrameVerdict::kMismatch);
  FrameHeader s = h;
  s.meta.shape_tag = 0x1234;  // same count, other shape
  EXPECT_EQ(check_frame(s, want, 40, 1 << 20), FrameVerdict::kMismatch);
  s = h;
  s.meta.seq = 6;
  EXPECT_EQ(check_frame(s, want, 40, 1 << 20), FrameVerdict::kMismatch);
  s = h;
  s.nbytes = ~uint64_t{0};  // a huge length is refused before anything is read
  EXPECT_EQ(check_frame(s, want, 40, 1 << 20), FrameVerdict::kTooLarge);
  s = h;
  s.magic = kAbortMagic;
  EXPECT_EQ(check_frame(s, want, 40, 1 << 20), FrameVerdict::kAbort);
  s.reserved = kAbortTimeout;  // a rank that gave up at its deadline
  EXPECT_EQ(check_frame(s, want, 40, 1 << 20), FrameVerdict::kAbort);
  s.reserved = 2;  // unknown abort flags
  EXPECT_EQ(check_frame(s, want, 40, 1 << 20), FrameVerdict::kNotAFrame);
  s.reserved = 0;
  s.nbytes = kMaxAbortReason + 1;  // a reason longer than any rank sends
  EXPECT_EQ(check_frame(s, want, 40, 1 << 20), FrameVerdict::kNotAFrame);
  s.magic = 0xdeadbeef;
  EXPECT_EQ(check_frame(s, want, 40, 1 << 20), FrameVerdict::kNotAFrame);
  // A first step sent ahead: taken in whatever is posted, never over the cap,
  // never with a negotiation frame's kind.
  s = h;
  s.magic = kAheadMagic;
  s.reserved = 7;  // its round
  EXPECT_EQ(check_frame(s, {}, 0, 1 << 20), FrameVerdict::kAhead);
  s.nbytes = (1 << 20) + 1;
  EXPECT_EQ(check_frame(s, {}, 0, 1 << 20), FrameVerdict::kTooLarge);
  s.nbytes = 40;
  s.meta.kind = transport::kNegotiationKind;
  EXPECT_EQ(check_frame(s, {}, 0, 1 << 20), FrameVerdict::kNotAFrame);
}

TEST(HandshakeMac, BindsRoleSecretAndBothNonces) {
  Hello h = good_hello();
  Challenge c{};
  c.magic = kChallengeMagic;
  c.nonce[0] = 1;
  Digest a = handshake_mac("secret-0123456789", Role::kAcceptor, h, c);
  Digest b = handshake_mac("secret-0123456789", Role::kConnector, h, c);
  EXPECT_NE(a, b);
  EXPECT_TRUE(verify_mac("secret-0123456789", Role::kAcceptor, h, c, a.data()));
  EXPECT_FALSE(verify_mac("secret-0123456789", Role::kConnector, h, c, a.data()));
  EXPECT_FALSE(verify_mac("secret-0123456780", Role::kAcceptor, h, c, a.data()));
  Challenge c2 = c;
  c2.nonce[31] ^= 1;
  EXPECT_FALSE(verify_mac("secret-0123456789", Role::kAcceptor, h, c2, a.data()));
  Hello h2 = h;
  h2.nonce[5] ^= 1;
  EXPECT_FALSE(verify_mac("secret-0123456789", Role::kAcceptor, h2, c, a.data()));
}

}  // namespace
}  // namespace pytfcomm::wire
