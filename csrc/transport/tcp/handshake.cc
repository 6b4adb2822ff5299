#include "transport/tcp/handshake.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "common/error.h"
#include "common/interrupt.h"
#include "common/logging.h"
#include "transport/wire_check.h"

namespace pytfcomm::tcp {
namespace {

// A connection still in its handshake. Each has a deadline of its own so
// that a slow or silent client cannot hold up the rest.
struct Pending {
  net::Fd fd;
  net::SockAddr from;
  AcceptorSession session;
  TimePoint deadline;
};

constexpr double kHandshakeSeconds = 10.0;
// Half-open handshakes kept at once; past this the oldest is dropped, so a
// flood costs bounded memory and descriptors while fresh (legitimate, fast)
// connections still get through.
constexpr size_t kMaxPending = 256;
// accept() failing for want of descriptors or kernel memory leaves the
// connection queued and the listener readable: retried every kShortRetry (not
// in a spin) in case another thread frees some, it fails the accept with the
// cause after kShortSeconds instead of at the connect deadline.
constexpr auto kShortRetry = std::chrono::milliseconds(50);
constexpr double kShortSeconds = 1.0;

void fill_random(uint8_t* p, size_t n) {
  std::random_device rd;  // getrandom()/urandom on Linux
  for (size_t i = 0; i < n; i += 4) {
    uint32_t v = rd();
    std::memcpy(p + i, &v, std::min<size_t>(4, n - i));
  }
}

template <typename T>
std::string bytes_of(const T& v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof(v));
}

// Reasons are ours, but some quote what the peer sent: keep each bounded.
constexpr size_t kMaxReasonChars = 160;

// "1.2.3.4:5" -> "1.2.3.4", "[::1]:5" -> "::1": refusals are counted per address.
std::string host_part(const std::string& from) {
  std::string host = from.substr(0, from.rfind(':'));
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  return host;
}

// Logs the summaries still owed when accept_peers returns or throws.
struct FinalFlush {
  RefusalLog& log;
  ~FinalFlush() {
    try {
      for (auto& line : log.flush(Clock::now(), true)) PTC_LOG(kWarn, line);
    } catch (...) {  // logging must not turn an error into std::terminate
    }
  }
};

}  // namespace

std::string RefusalLog::refuse(const std::string& from, const std::string& why, TimePoint now) {
  std::string host = host_part(from);
  auto it = sources_.find(host);
  if (it == sources_.end() && sources_.size() < limits_.max_sources) {
    it = sources_.emplace(host, Source{}).first;
  }
  bool other = it == sources_.end();
  Source& s = other ? others_ : it->second;
  s.last = now;
  if (now - window_ >= std::chrono::duration<double>(limits_.interval_s)) {
    window_ = now;
    window_lines_ = 0;
  }
  if (!other && s.logged < limits_.lines_per_source && window_lines_ < limits_.lines_per_interval) {
    ++s.logged;
    ++window_lines_;
    return str_cat("refused connection from ", from, " to ", what_, ": ", why);
  }
  if (s.counted++ == 0) s.since = now;
  std::string reason = why.substr(0, kMaxReasonChars);
  auto r = std::find_if(s.reasons.begin(), s.reasons.end(),
                        [&](const auto& e) { return e.first == reason; });
  if (r != s.reasons.end()) {
    ++r->second;
  } else if (s.reasons.size() < limits_.max_reasons) {
    s.reasons.emplace_back(std::move(reason), 1);
  } else {
    ++s.other_reasons;
  }
  return "";
}

std::string RefusalLog::summary(const std::string& who, Source& s, TimePoint now) const {
  char took[32];
  std::snprintf(took, sizeof(took), "%.1f", std::chrono::duration<double>(now - s.since).count());
  std::string line = str_cat("refused ", s.counted, s.logged > 0 ? " more" : "",
                             s.counted == 1 ? " connection" : " connections", " from ", who, " to ",
                             what_, " in the last ", took, " s (not logged one by one)");
  const char* sep = "; reasons: ";
  for (const auto& [reason, n] : s.reasons) {
    line += str_cat(sep, reason, " [", n, "]");
    sep = ", ";
  }
  if (s.other_reasons > 0) line += str_cat(sep, "other reasons [", s.other_reasons, "]");
  s.counted = 0;
  s.other_reasons = 0;
  s.reasons.clear();
  s.since = now;
  return line;
}

std::vector<std::string> RefusalLog::flush(TimePoint now, bool final) {
  auto interval = std::chrono::duration<double>(limits_.interval_s);
  std::vector<std::string> lines;
  auto due = [&](const Source& s) { return s.counted > 0 && (final || now - s.since >= interval); };
  for (auto it = sources_.begin(); it != sources_.end();) {
    if (due(it->second)) lines.push_back(summary(it->first, it->second, now));
    // Quiet for an interval: forget it, which frees its slot and its full lines.
    if (it->second.counted == 0 && now - it->second.last >= interval) {
      it = sources_.erase(it);
    } else {
      ++it;
    }
  }
  if (due(others_)) lines.push_back(summary("other addresses", others_, now));
  return lines;
}

size_t AcceptorSession::wanted() const {
  if (state_ == State::kHello) return sizeof(hello_) - got_;
  if (state_ == State::kProof) return sizeof(proof_) - got_;
  return 0;
}

void AcceptorSession::consume(const uint8_t* data, size_t n) {
  n = std::min(n, wanted());
  if (n == 0) return;
  auto* dst = state_ == State::kHello ? reinterpret_cast<uint8_t*>(&hello_)
                                      : reinterpret_cast<uint8_t*>(&proof_);
  std::memcpy(dst + got_, data, n);
  size_t before = got_;
  got_ += n;
  if (state_ == State::kHello) {
    // Reject a wrong magic as soon as its 8 bytes are in.
    if (before < sizeof(uint64_t) && got_ >= sizeof(uint64_t) &&
        hello_.magic != wire::kHelloMagic) {
      return fail("not a pytfcomm connection (bad magic number)");
    }
    if (got_ == sizeof(hello_)) on_hello();
  } else if (got_ == sizeof(proof_)) {
    on_proof();
  }
}

void AcceptorSession::on_hello() {
  std::string why = wire::check_hello(hello_);
  if (!why.empty()) return fail(why);
  bool have = !auth_->secret.empty();
  bool peer = (hello_.flags & wire::kFlagAuth) != 0;
  challenge_.magic = wire::kChallengeMagic;
  challenge_.flags = have ? wire::kFlagAuth : 0;
  challenge_.rank = auth_->rank;
  if (peer != have) {
    // Tell a rank of our own job what is wrong; this reveals nothing secret.
    challenge_.status = static_cast<uint32_t>(have ? wire::HandshakeStatus::kSecretRequired
                                                   : wire::HandshakeStatus::kSecretUnexpected);
    outbox_ = bytes_of(challenge_);
    return fail(have ? "failed authentication: it has no job secret (PYTFCOMM_SECRET)"
                     : "it uses a job secret but this rank has none (PYTFCOMM_SECRET)");
  }
  challenge_.status = static_cast<uint32_t>(wire::HandshakeStatus::kOk);
  fill_random(challenge_.nonce, sizeof(challenge_.nonce));
  outbox_ = bytes_of(challenge_);
  state_ = State::kProof;
  got_ = 0;
}

void AcceptorSession::on_proof() {
  if (proof_.magic != wire::kProofMagic) return fail("bad handshake proof (not pytfcomm)");
  wire::Confirm confirm{};
  confirm.magic = wire::kConfirmMagic;
  const std::string& secret = auth_->secret;
  if (!secret.empty()) {
    if (!wire::verify_mac(secret, wire::Role::kConnector, hello_, challenge_, proof_.mac)) {
      confirm.status = static_cast<uint32_t>(wire::HandshakeStatus::kBadProof);
      outbox_ = bytes_of(confirm);
      return fail(
          "failed authentication: wrong job secret (PYTFCOMM_SECRET) or a replayed handshake");
    }
    // Only a connector that proved itself learns a MAC of ours.
    Digest mac = wire::handshake_mac(secret, wire::Role::kAcceptor, hello_, challenge_);
    std::memcpy(confirm.mac, mac.data(), mac.size());
  }
  confirm.status = static_cast<uint32_t>(wire::HandshakeStatus::kOk);
  outbox_ = bytes_of(confirm);
  state_ = State::kDone;
}

wire::Hello make_hello(wire::HelloPurpose purpose, int rank, int size, uint16_t listen_port,
                       const std::string& listen_host, const std::string& host_id,
                       bool with_secret) {
  wire::Hello h{};
  h.magic = wire::kHelloMagic;
  h.version = wire::kProtocolVersion;
  h.purpose = static_cast<uint32_t>(purpose);
  h.rank = rank;
  h.size = size;
  h.listen_port = listen_port;
  h.flags = with_secret ? wire::kFlagAuth : 0;
  fill_random(h.nonce, sizeof(h.nonce));
  std::strncpy(h.listen_host, listen_host.c_str(), wire::kMaxHost - 1);
  std::strncpy(h.host_id, host_id.c_str(), wire::kMaxHostId - 1);
  return h;
}

void connect_handshake(int fd, const wire::Hello& hello, const AuthConfig& auth, int peer_rank,
                       TimePoint deadline, const std::string& what) {
  net::write_all(fd, &hello, sizeof(hello), deadline, what);
  wire::Challenge ch{};
  net::read_all(fd, &ch, sizeof(ch), deadline, what);
  bool have = !auth.secret.empty();
  std::string why = wire::check_challenge(ch, peer_rank, have);
  if (!why.empty()) {
    if (ch.magic != wire::kChallengeMagic) {
      PTC_THROW(kConfig, what, " ", why, ": is the address pointing at another service?");
    }
    PTC_THROW(kAuth, "cannot connect to ", what, ": ", why);
  }
  wire::Proof proof{};
  proof.magic = wire::kProofMagic;
  if (have) {
    Digest mac = wire::handshake_mac(auth.secret, wire::Role::kConnector, hello, ch);
    std::memcpy(proof.mac, mac.data(), mac.size());
  }
  net::write_all(fd, &proof, sizeof(proof), deadline, what);
  wire::Confirm confirm{};
  net::read_all(fd, &confirm, sizeof(confirm), deadline, what);
  why = wire::check_confirm(confirm);
  if (!why.empty()) PTC_THROW(kAuth, "cannot connect to ", what, ": ", why);
  if (have && !wire::verify_mac(auth.secret, wire::Role::kAcceptor, hello, ch, confirm.mac)) {
    PTC_THROW(kAuth, what,
              " failed to prove it knows the job secret: PYTFCOMM_SECRET differs between "
              "ranks, or something other than this job's rank answers at that address");
  }
}

std::vector<AcceptedPeer> accept_peers(int listener, int count, const AuthConfig& auth,
                                       const HelloCheck& check, TimePoint deadline,
                                       const std::string& what, const FatalHook& on_fatal) {
  std::vector<AcceptedPeer> done;
  std::vector<Pending> pending;
  RefusalLog refusals(what);
  FinalFlush final_flush{refusals};
  auto drop = [&](size_t i, const std::string& why) {
    std::string line = refusals.refuse(pending[i].from.to_string(), why, Clock::now());
    if (!line.empty()) PTC_LOG(kWarn, line);
    pending.erase(pending.begin() + static_cast<long>(i));
  };
  TimePoint short_since = TimePoint::max();  // accept() has lacked resources since
  while (static_cast<int>(done.size()) < count) {
    poll_interrupt();
    auto now = Clock::now();
    for (auto& line : refusals.flush(now)) PTC_LOG(kWarn, line);
    if (now >= deadline) {
      PTC_THROW(kTimeout, "timed out waiting for ", count - static_cast<int>(done.size()),
                " more rank(s) to connect to ", what,
                "; are all ranks started with the same size, rendezvous address and "
                "PYTFCOMM_SECRET? (raise PYTFCOMM_CONNECT_TIMEOUT if they start far apart)");
    }
    for (size_t i = 0; i < pending.size();) {
      if (now >= pending[i].deadline) {
        drop(i, str_cat("no complete handshake within ", kHandshakeSeconds, " s"));
      } else {
        ++i;
      }
    }
    const bool starved = short_since != TimePoint::max();
    std::vector<pollfd> pfds;
    pfds.push_back({listener, static_cast<short>(starved ? 0 : POLLIN), 0});
    for (auto& p : pending) {
      short ev = POLLIN;
      if (!p.session.outbox().empty()) ev |= POLLOUT;
      pfds.push_back({p.fd.get(), ev, 0});
    }
    const int wait_ms = starved ? static_cast<int>(kShortRetry.count()) : 100;
    int rc = ::poll(pfds.data(), pfds.size(), millis_until(deadline, wait_ms));
    if (rc < 0 && errno != EINTR) PTC_THROW(kInternal, "poll failed: ", std::strerror(errno));
    if (rc <= 0 && !starved) continue;
    if (starved || (pfds[0].revents & POLLIN)) {
      for (int i = 0; i < 64; ++i) {  // drain the backlog, bounded
        net::SockAddr from;
        int shortage = 0;
        net::Fd fd = net::accept_one(listener, &from, &shortage);
        if (shortage != 0) {
          now = Clock::now();
          if (short_since == TimePoint::max()) short_since = now;
          if (std::chrono::duration<double>(now - short_since).count() >= kShortSeconds) {
            PTC_THROW(kConfig,
                      net::resource_shortage(shortage, str_cat("accepting connections to ", what)));
          }
          break;
        }
        short_since = TimePoint::max();
        if (!fd.valid()) break;
        if (pending.size() >= kMaxPending) drop(0, "too many handshakes in progress");
        pending.push_back({std::move(fd), from, AcceptorSession(auth),
                           std::min(deadline, deadline_after(kHandshakeSeconds))});
      }
    }
    for (size_t i = 0; i < pending.size();) {
      Pending& p = pending[i];
      std::string& out = p.session.outbox();
      std::string why;
      uint8_t buf[512];
      while (p.session.wanted() > 0) {
        ssize_t r = ::recv(p.fd.get(), buf, std::min(sizeof(buf), p.session.wanted()), 0);
        if (r > 0) {
          p.session.consume(buf, static_cast<size_t>(r));
        } else if (r == 0) {
          why = p.session.state() == AcceptorSession::State::kProof
                    ? "closed during authentication (a rank with another PYTFCOMM_SECRET?)"
                    : "closed before completing its handshake";
          break;
        } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          why = std::strerror(errno);
          break;
        } else {
          break;
        }
      }
      // Messages are tiny: one non-blocking send nearly always takes all.
      if (!out.empty()) {
        ssize_t w = ::send(p.fd.get(), out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) out.erase(0, static_cast<size_t>(w));
        if (w < 0 && why.empty() && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          why = std::strerror(errno);
        }
      }
      if (why.empty() && p.session.state() == AcceptorSession::State::kFailed) {
        why = p.session.error();
      }
      if (why.empty() && p.session.state() == AcceptorSession::State::kDone && out.empty()) {
        try {
          why = check(p.session.hello(), p.from);
        } catch (const Error& e) {
          if (e.kind() == ErrorKind::kConfig && on_fatal) on_fatal(done, p.fd.get(), e.what());
          throw;
        }
        if (why.empty()) {
          done.push_back({std::move(p.fd), p.session.hello(), p.from});
          pending.erase(pending.begin() + static_cast<long>(i));
          continue;
        }
      }
      if (!why.empty()) {
        drop(i, why);
        continue;
      }
      ++i;
    }
  }
  return done;
}

}  // namespace pytfcomm::tcp
