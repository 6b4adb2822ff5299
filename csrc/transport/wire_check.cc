#include "transport/wire_check.h"

#include <cstring>

#include "common/dtype.h"
#include "common/error.h"
#include "transport/liveness.h"

namespace pytfcomm::wire {
namespace {

bool terminated(const char* s, size_t cap) { return std::memchr(s, 0, cap) != nullptr; }

}  // namespace

std::string check_hello(const Hello& h) {
  if (h.magic != kHelloMagic) return "not a pytfcomm connection (bad magic number)";
  if (h.version != kProtocolVersion) {
    return str_cat("protocol version ", h.version, " but this build speaks ", kProtocolVersion,
                   " (mixed pytfcomm versions in one job?)");
  }
  if (h.purpose != static_cast<uint32_t>(HelloPurpose::kJoin) &&
      h.purpose != static_cast<uint32_t>(HelloPurpose::kData)) {
    return str_cat("unknown connection purpose ", h.purpose);
  }
  if (!terminated(h.listen_host, kMaxHost) || !terminated(h.host_id, kMaxHostId)) {
    return "unterminated string in hello";
  }
  if (h.size < 1 || h.rank < 0 || h.rank >= h.size) {
    return str_cat("impossible rank ", h.rank, " of size ", h.size);
  }
  if (h.listen_port > 65535) return str_cat("bad port ", h.listen_port);
  if ((h.flags & ~kFlagAuth) != 0) return str_cat("unknown hello flags ", h.flags);
  return "";
}

std::string check_challenge(const Challenge& c, int expected_rank, bool have_secret) {
  if (c.magic != kChallengeMagic) return "answered with something that is not pytfcomm";
  switch (static_cast<HandshakeStatus>(c.status)) {
    case HandshakeStatus::kOk:
      break;
    case HandshakeStatus::kSecretRequired:
      return "it requires a job secret and this rank has none: set the same PYTFCOMM_SECRET on "
             "every rank";
    case HandshakeStatus::kSecretUnexpected:
      return "it runs without a job secret but this rank has one: set the same "
             "PYTFCOMM_SECRET on every rank (or unset it everywhere)";
    default:
      return str_cat("unknown handshake status ", c.status);
  }
  if (c.rank != expected_rank) {
    return str_cat("it says it is rank ", c.rank, ", not rank ", expected_rank);
  }
  bool peer_auth = (c.flags & kFlagAuth) != 0;
  if ((c.flags & ~kFlagAuth) != 0) return str_cat("unknown handshake flags ", c.flags);
  if (peer_auth != have_secret) {
    return peer_auth ? "it uses a job secret but this rank has none: set PYTFCOMM_SECRET"
                     : "it has no job secret but this rank has one: set the same "
                       "PYTFCOMM_SECRET on every rank";
  }
  return "";
}

std::string check_confirm(const Confirm& c) {
  if (c.magic != kConfirmMagic) return "answered with something that is not pytfcomm";
  if (c.status == static_cast<uint32_t>(HandshakeStatus::kBadProof)) {
    return "it rejected this rank's proof of the job secret: PYTFCOMM_SECRET differs between "
           "ranks";
  }
  if (c.status != static_cast<uint32_t>(HandshakeStatus::kOk)) {
    return str_cat("unknown handshake status ", c.status);
  }
  return "";
}

std::string check_join_reply(const JoinReply& r, int expected_size) {
  if (r.magic != kHelloMagic) return "answered with something that is not pytfcomm";
  if (r.status != 0) return "refused this rank";
  if (r.size != expected_size) {
    return str_cat("runs a job of size ", r.size, " but this rank was given size ", expected_size,
                   ": start every rank with the same size");
  }
  return "";
}

std::string check_peer_entry(const PeerEntry& e, int expected_rank) {
  if (e.rank != expected_rank) {
    return str_cat("address table entry ", expected_rank, " claims rank ", e.rank);
  }
  if (!terminated(e.host, kMaxHost) || !terminated(e.host_id, kMaxHostId)) {
    return str_cat("unterminated string in address table entry ", expected_rank);
  }
  if (e.port > 65535) return str_cat("bad port ", e.port, " for rank ", expected_rank);
  return "";
}

bool abort_ok(uint64_t nbytes, uint32_t flags, uint64_t cap) {
  return nbytes <= cap && (flags & ~kAbortAllFlags) == 0;
}

FrameVerdict check_frame(const FrameHeader& got, const transport::MessageMeta& want,
                         uint64_t want_nbytes, uint64_t max_message) {
  if (got.magic == kAbortMagic) {
    return abort_ok(got.nbytes, got.reserved, kMaxAbortReason) ? FrameVerdict::kAbort
                                                               : FrameVerdict::kNotAFrame;
  }
  if (got.magic == kStatusMagic) {
    bool ok = got.nbytes == 0 && (got.reserved & ~transport::kStatusAllFlags) == 0;
    return ok ? FrameVerdict::kStatus : FrameVerdict::kNotAFrame;
  }
  if (got.magic == kBeatMagic) {
    static const transport::MessageMeta kZero{};
    bool ok = got.nbytes == 0 && got.reserved == 0 && got.meta == kZero;
    return ok ? FrameVerdict::kBeat : FrameVerdict::kNotAFrame;
  }
  if (got.magic == kRoundMagic) {
    bool ok =
        got.reserved == 0 && got.meta.kind == transport::kNegotiationKind && got.meta.count > 0;
    return ok ? FrameVerdict::kRound : FrameVerdict::kNotAFrame;
  }
  if (got.magic == kAheadMagic) {
    if (got.nbytes > max_message) return FrameVerdict::kTooLarge;
    return got.meta.kind != transport::kNegotiationKind ? FrameVerdict::kAhead
                                                        : FrameVerdict::kNotAFrame;
  }
  if (got.magic != kDataMagic) return FrameVerdict::kNotAFrame;
  if (got.nbytes > max_message) return FrameVerdict::kTooLarge;
  if (!(got.meta == want) || got.nbytes != want_nbytes) return FrameVerdict::kMismatch;
  return FrameVerdict::kOk;
}

Digest handshake_mac(const std::string& secret, Role role, const Hello& hello,
                     const Challenge& challenge) {
  static const char kAcceptor[] = "pytfcomm-v2|acceptor|";
  static const char kConnector[] = "pytfcomm-v2|connector|";
  HmacSha256 mac(secret);
  if (role == Role::kAcceptor) {
    mac.update(kAcceptor, sizeof(kAcceptor) - 1);
  } else {
    mac.update(kConnector, sizeof(kConnector) - 1);
  }
  mac.update(&hello, sizeof(hello));
  mac.update(&challenge, sizeof(challenge));
  return mac.finish();
}

bool verify_mac(const std::string& secret, Role role, const Hello& hello,
                const Challenge& challenge, const uint8_t* mac) {
  Digest want = handshake_mac(secret, role, hello, challenge);
  return constant_time_equal(want.data(), mac, want.size());
}

std::string describe_meta(const transport::MessageMeta& m, uint64_t nbytes) {
  return str_cat("collective #", m.seq, " kind ", int(m.kind), " phase ", int(m.phase), " dtype ",
                 valid_dtype(m.dtype) ? dtype_name(static_cast<DType>(m.dtype)) : "?", " op ",
                 valid_op(m.op) ? op_name(static_cast<ReduceOp>(m.op)) : "?", " root ", m.root,
                 " count ", m.count, " shape tag ", m.shape_tag, " (", nbytes,
                 " bytes in this message)");
}

}  // namespace pytfcomm::wire
