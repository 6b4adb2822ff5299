// Validation of everything that arrives from the network, as pure functions
// (no sockets, no state) so that the transport, the unit tests and the fuzz
// targets (fuzz/) all exercise the very same code. Each returns "" when the
// input is acceptable, else a reason fit for a log line or an error message.
#pragma once

#include <cstdint>
#include <string>

#include "common/sha256.h"
#include "transport/wire.h"

namespace pytfcomm::wire {

// Structural checks of a Hello: magic, version, purpose, rank/size, port,
// NUL-terminated strings.
std::string check_hello(const Hello& h);

// A Challenge the connector received from the rank it meant to reach.
// `have_secret`: whether this side holds a job secret.
std::string check_challenge(const Challenge& c, int expected_rank, bool have_secret);
// The acceptor's Confirm; does not verify its MAC (see verify_mac).
std::string check_confirm(const Confirm& c);

// Rank 0's JoinReply header (status already known to be 0) and one entry of
// the address table that follows it.
std::string check_join_reply(const JoinReply& r, int expected_size);
std::string check_peer_entry(const PeerEntry& e, int expected_rank);

enum class FrameVerdict {
  kOk,
  kAbort,      // the peer gave up; a reason of nbytes <= kMaxAbortReason follows
  kStatus,     // a well-formed STAT frame (no payload), not matched with receives
  kBeat,       // a well-formed BEAT frame (no payload), not matched with receives
  kRound,      // a RND frame (a negotiation record follows), not matched with receives
  kAhead,      // an AHED frame (a collective's first message, sent ahead), not matched either
  kNotAFrame,  // bad magic: a corrupt or foreign stream
  kTooLarge,   // announced payload over the PYTFCOMM_MAX_MESSAGE cap
  kMismatch,   // metadata or length differs from the posted receive
};
// The reason of an ABRT frame or of a shared-memory abort note: `nbytes` of
// text, at most `cap`, under known AbortFlags.
bool abort_ok(uint64_t nbytes, uint32_t flags, uint64_t cap);

// Compare a received frame header with the receive this rank posted.
FrameVerdict check_frame(const FrameHeader& got, const transport::MessageMeta& want,
                         uint64_t want_nbytes, uint64_t max_message);

// "collective #12 kind 1 phase 2 dtype float32 ...", for error messages.
std::string describe_meta(const transport::MessageMeta& m, uint64_t nbytes);

// The handshake MACs (docs/security.md): HMAC-SHA256(secret, label | hello |
// challenge). Each side's label differs, so one side's MAC
// can never be replayed as the other's; both nonces are in the transcript,
// so a recorded exchange never verifies on a new connection.
enum class Role { kAcceptor, kConnector };
Digest handshake_mac(const std::string& secret, Role role, const Hello& hello,
                     const Challenge& challenge);
// Constant-time check of `mac` against the expected one.
bool verify_mac(const std::string& secret, Role role, const Hello& hello,
                const Challenge& challenge, const uint8_t* mac);

}  // namespace pytfcomm::wire
