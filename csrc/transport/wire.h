// Byte layouts that cross the network. Little-endian hosts only (checked at
// build time); every field is validated on receipt before it is used.
#pragma once

#include <cstdint>

#include "transport/data_plane.h"

namespace pytfcomm::wire {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "wire format assumes little endian");

// 3: STAT frames (stall inspector); 4: extra TCP streams; 5: ABRT flags and
// shared-memory abort notes; 6: negotiation rounds (engine/round_record.h),
// BEAT frames, the error kind in ABRT flags; 7: halving-doubling all-reduce
// (algorithm 5, phase 13), and auto picking it: two more values agreed at setup;
// 8: negotiation records carry whole labels (up to 512 bytes, packed after the
// table) instead of 39 characters in each entry; 9: records confirm agreed
// collectives by their slot in the agreed cache (engine/agreed_cache.h);
// 10: bundles of negotiation records send equal records of consecutive ranks
// once, with their run length (transport/host/bundle.h); 11: AHED frames (a
// pairwise all-reduce's first step sent right behind the record) and the
// record flag that announces one (engine/round_record.h); 12: one more value
// agreed at setup (whether ranks outnumber cores on some host)
constexpr uint32_t kProtocolVersion = 12;
constexpr uint64_t kHelloMagic = 0x314d4d4f43465450ULL;  // "PTFCOMM1"
constexpr uint32_t kDataMagic = 0x41544144;              // "DATA"
constexpr uint32_t kAbortMagic = 0x54524241;             // "ABRT"
constexpr uint32_t kStatusMagic = 0x54415453;            // "STAT"
constexpr uint32_t kBeatMagic = 0x54414542;              // "BEAT"
constexpr uint32_t kRoundMagic = 0x20444e52;             // "RND "
constexpr uint32_t kAheadMagic = 0x44454841;             // "AHED"
constexpr uint32_t kMaxAbortReason = 4096;
constexpr uint32_t kMaxJoinError = 4096;

// Flags of an ABRT frame (its `reserved` field) and of a shared-memory abort
// note: why the sender gave up, so that every rank raises the same class.
// Bits 8..15 carry the sender's ErrorKind + 1 (0: not given), so that a rank
// told of a failure raises the class of its root cause.
enum AbortFlags : uint32_t {
  kAbortTimeout = 1,  // a deadline passed (else: a lost peer, a mismatch, ...)
  kAbortKindShift = 8,
  kAbortKindMask = 0xff00,
  kAbortAllFlags = 1 | 0xff00,
};

// Precedes every message on an established connection. A STAT frame (stall
// inspector, no payload) may come between any two frames: `reserved` holds
// its StatusFlags, `meta` the collective its sender is in (or last ran). So
// may a BEAT frame (liveness, no payload, all other fields zero), and a RND
// frame: a negotiation record of `nbytes` (meta.kind = kNegotiationKind,
// meta.count = the round), taken in by the receiver whenever it reads, into
// one of two slots by round parity (a peer is at most one round ahead). An
// AHED frame is taken in the same way: the first message of a collective's
// data sent right behind its sender's record of a round (`reserved`: the
// round's low 32 bits, `meta`: the collective's, `nbytes` of payload up to
// the agreed limit), used or dropped by the receiver once the round decided
// (docs/negotiation.md, "The first step rides behind the record"). An ABRT
// frame is the last one: `reserved` holds AbortFlags, a reason of `nbytes`
// <= kMaxAbortReason follows.
struct FrameHeader {
  uint32_t magic;  // kDataMagic, kAbortMagic or kStatusMagic
  uint32_t reserved;
  uint64_t nbytes;  // payload length that follows
  transport::MessageMeta meta;
};
static_assert(sizeof(FrameHeader) == 40, "FrameHeader layout is the wire format");

enum class HelloPurpose : uint32_t {
  kJoin = 1,  // a rank registering with rank 0's rendezvous
  kData = 2,  // a rank opening its data connection to a lower rank
};

constexpr int kMaxHost = 256;
constexpr int kMaxHostId = 128;

// First bytes a connecting rank sends.
struct Hello {
  uint64_t magic;  // kHelloMagic
  uint32_t version;
  uint32_t purpose;  // HelloPurpose
  int32_t rank;
  int32_t size;
  uint32_t listen_port;  // kJoin: its listener; kData: the stream index (0 = bootstrap)
  uint32_t flags;
  uint8_t nonce[32];           // for the authentication handshake
  char listen_host[kMaxHost];  // NUL-terminated
  char host_id[kMaxHostId];    // NUL-terminated
};
static_assert(sizeof(Hello) == 448, "Hello layout is the wire format (no padding)");

// Rank 0's answer to a kJoin: status, then `size` PeerEntry records.
struct JoinReply {
  uint64_t magic;  // kHelloMagic
  int32_t status;  // 0 ok, otherwise an error message of `message_len` bytes follows
  int32_t size;
  uint32_t message_len;
  uint32_t reserved;
};

// Set in Hello::flags and Challenge::flags by a side that holds a job secret.
constexpr uint32_t kFlagAuth = 1;
constexpr uint32_t kChallengeMagic = 0x4c4c4843;  // "CHLL"
constexpr uint32_t kProofMagic = 0x464f5250;      // "PROF"
constexpr uint32_t kConfirmMagic = 0x4d524643;    // "CFRM"
constexpr int kMacBytes = 32;

enum class HandshakeStatus : uint32_t {
  kOk = 0,
  kSecretRequired = 1,    // the acceptor has a secret, the connector has none
  kSecretUnexpected = 2,  // the connector has a secret, the acceptor has none
  kBadProof = 3,          // the connector's MAC did not verify
};

// The handshake after a Hello (docs/security.md): the acceptor answers with a
// Challenge (its nonce), the connector proves it knows the secret first
// (Proof), and only then does the acceptor prove itself (Confirm). A stranger
// who connects to a listener therefore never obtains a MAC to guess the
// secret from offline. Without a job secret the MACs are all zero.
struct Challenge {
  uint32_t magic;   // kChallengeMagic
  uint32_t status;  // HandshakeStatus
  uint32_t flags;   // kFlagAuth when the acceptor holds a secret
  int32_t rank;     // the acceptor's rank, bound into the MACs
  uint8_t nonce[32];
};
static_assert(sizeof(Challenge) == 48, "Challenge layout is the wire format");

struct Proof {
  uint32_t magic;  // kProofMagic
  uint32_t reserved;
  uint8_t mac[kMacBytes];
};
static_assert(sizeof(Proof) == 40, "Proof layout is the wire format");

struct Confirm {
  uint32_t magic;   // kConfirmMagic
  uint32_t status;  // kOk or kBadProof
  uint8_t mac[kMacBytes];
};
static_assert(sizeof(Confirm) == 40, "Confirm layout is the wire format");

struct PeerEntry {
  int32_t rank;
  uint32_t port;
  char host[kMaxHost];
  char host_id[kMaxHostId];
};

}  // namespace pytfcomm::wire
