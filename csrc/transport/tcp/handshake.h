// Connection handshakes during bootstrap (docs/security.md). The acceptor
// side serves many connections at once, each with its own deadline and
// strict validation, so a stray or hostile client (random bytes, a wrong
// protocol or secret, a stalled sender) is dropped and logged while the
// job's own ranks get through. The per-connection protocol is a pure state
// machine (AcceptorSession) so the fuzz targets drive the exact code the
// listener runs.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "transport/net/socket.h"
#include "transport/wire.h"

namespace pytfcomm::tcp {

struct AuthConfig {
  std::string secret;  // "" = no job secret: magic/version checks only
  int rank = 0;        // this process's rank (an acceptor names itself with it)
};

// One accepted connection's handshake, fed with the bytes that arrive.
class AcceptorSession {
 public:
  enum class State { kHello, kProof, kDone, kFailed };

  explicit AcceptorSession(const AuthConfig& auth) : auth_(&auth) {}

  // How many more bytes the current message needs; read no more than this,
  // since what follows the handshake belongs to the data stream.
  size_t wanted() const;
  // Consume up to wanted() bytes.
  void consume(const uint8_t* data, size_t n);
  // Bytes to send to the peer now (challenge, confirmation, refusal notice).
  std::string& outbox() { return outbox_; }

  State state() const { return state_; }
  const std::string& error() const { return error_; }
  const wire::Hello& hello() const { return hello_; }

 private:
  void on_hello();
  void on_proof();
  void fail(std::string why) {
    state_ = State::kFailed;
    error_ = std::move(why);
  }

  const AuthConfig* auth_;
  State state_ = State::kHello;
  wire::Hello hello_{};
  wire::Challenge challenge_{};
  wire::Proof proof_{};
  size_t got_ = 0;
  std::string outbox_;
  std::string error_;
};

// What a listener says about the connections it refuses. A flood of bogus
// connections must flood neither the log nor memory: per source address,
// the first few refusals are logged in full; later ones are counted, per
// reason, and summarised at most once per interval. At most max_sources
// addresses are tracked at once; any others share one entry. An address
// that stopped refusing for an interval is forgotten (and gets full lines
// again). Times come in as arguments, so tests can drive it.
class RefusalLog {
 public:
  struct Limits {
    int lines_per_source = 5;     // full lines per address while it keeps refusing
    int lines_per_interval = 10;  // full lines per interval, all addresses together
    double interval_s = 10;       // at most one summary per address per interval
    size_t max_sources = 8;       // addresses tracked at once
    size_t max_reasons = 6;       // distinct reasons counted per address
  };

  explicit RefusalLog(std::string what) : RefusalLog(std::move(what), Limits{}) {}
  RefusalLog(std::string what, const Limits& limits) : what_(std::move(what)), limits_(limits) {}

  // A refused connection from `from` ("ip:port"): the line to log now, or ""
  // when it is only counted.
  std::string refuse(const std::string& from, const std::string& why, TimePoint now);
  // Summaries of the counted refusals that are due at `now`; with `final`,
  // of all of them (the listener closes).
  std::vector<std::string> flush(TimePoint now, bool final = false);
  // Addresses tracked now (bounded by max_sources).
  size_t tracked() const { return sources_.size(); }

 private:
  struct Source {
    TimePoint since{};  // first refusal counted since the last summary
    TimePoint last{};   // last refusal
    int logged = 0;     // full lines so far
    long counted = 0;   // refusals counted since the last summary
    std::vector<std::pair<std::string, long>> reasons;
    long other_reasons = 0;
  };
  std::string summary(const std::string& who, Source& s, TimePoint now) const;

  std::string what_;
  Limits limits_;
  std::map<std::string, Source> sources_;
  Source others_;  // refusals from addresses beyond max_sources
  TimePoint window_{};
  int window_lines_ = 0;
};

struct AcceptedPeer {
  net::Fd fd;
  wire::Hello hello{};
  net::SockAddr from;
};

// Job-level check of an authenticated hello. Returns "" when acceptable,
// else why not (that connection is dropped). A kConfig error thrown from it
// aborts the whole accept (a rank of our own job is misconfigured).
using HelloCheck = std::function<std::string(const wire::Hello&, const net::SockAddr&)>;

// Called before a kConfig error from `check` propagates, with the peers
// accepted so far and the offending connection, so they can be told why.
using FatalHook = std::function<void(std::vector<AcceptedPeer>& accepted, int offender_fd,
                                     const std::string& why)>;

// Accept until `count` connections completed the handshake and passed
// `check`, or throw at `deadline`.
std::vector<AcceptedPeer> accept_peers(int listener, int count, const AuthConfig& auth,
                                       const HelloCheck& check, TimePoint deadline,
                                       const std::string& what,
                                       const FatalHook& on_fatal = nullptr);

// The connector's side: send `hello`, prove we hold the secret, then check
// that the acceptor is rank `peer_rank` and (with a secret) proves it too.
// Throws kAuth on an authentication failure, kConfig when the peer is not
// pytfcomm.
void connect_handshake(int fd, const wire::Hello& hello, const AuthConfig& auth, int peer_rank,
                       TimePoint deadline, const std::string& what);

wire::Hello make_hello(wire::HelloPurpose purpose, int rank, int size, uint16_t listen_port,
                       const std::string& listen_host, const std::string& host_id,
                       bool with_secret);

}  // namespace pytfcomm::tcp
