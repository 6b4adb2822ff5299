#include "transport/tcp/extra_streams.h"

#include <set>
#include <utility>

#include "common/error.h"
#include "common/logging.h"
#include "transport/tcp/handshake.h"
#include "transport/wire.h"

namespace pytfcomm::tcp {
namespace {

constexpr uint32_t kOfferMagic = 0x4d525453;  // "STRM"
constexpr uint32_t kOfferVersion = 1;
constexpr uint32_t kMaxStreams = 16;

struct StreamOffer {
  uint32_t magic;
  uint32_t version;
  uint32_t streams;  // how many this side wants (1 = just the bootstrap one)
  uint32_t port;     // its extra-stream listener; 0 = none
};
static_assert(sizeof(StreamOffer) == 16, "StreamOffer layout is the wire format");

std::string check_offer(const StreamOffer& o) {
  if (o.magic != kOfferMagic || o.version != kOfferVersion) return "sent no stream offer";
  if (o.streams < 1 || o.streams > kMaxStreams) return str_cat("offered ", o.streams, " streams");
  if (o.port > 65535) return str_cat("offered port ", o.port);
  return "";
}

}  // namespace

void connect_extra_streams(int rank, BootstrapResult& boot, const std::vector<bool>& eligible,
                           int streams, const std::string& secret, TimePoint deadline) {
  const int n = static_cast<int>(boot.peers.size());
  boot.extra_fds.resize(static_cast<size_t>(n));
  std::vector<int> peers;
  for (int r = 0; r < n; ++r) {
    if (r != rank && eligible[static_cast<size_t>(r)]) peers.push_back(r);
  }
  if (peers.empty()) return;
  PTC_CHECK_ARG(streams >= 1 && streams <= static_cast<int>(kMaxStreams),
                "streams per peer must be in [1, ", kMaxStreams, "], got ", streams);
  auto what = [&](int r) { return str_cat("rank ", r, " (opening extra TCP streams)"); };
  auto fd_of = [&](int r) { return boot.fds[static_cast<size_t>(r)].get(); };

  // Higher ranks connect to this one: listen if any of them might.
  net::Fd listener;
  net::SockAddr bound;
  bool higher = peers.back() > rank;
  if (streams > 1 && higher)
    listener = net::listen_on(boot.peers[static_cast<size_t>(rank)].host, 0, &bound);
  StreamOffer mine{kOfferMagic, kOfferVersion, static_cast<uint32_t>(streams),
                   listener.valid() ? bound.port() : 0u};
  for (int r : peers) net::write_all(fd_of(r), &mine, sizeof(mine), deadline, what(r));
  std::vector<uint32_t> k(static_cast<size_t>(n), 1);
  for (int r : peers) {
    StreamOffer theirs{};
    net::read_all(fd_of(r), &theirs, sizeof(theirs), deadline, what(r));
    std::string why = check_offer(theirs);
    if (!why.empty()) PTC_THROW(kPeerLost, what(r), ": it ", why);
    k[static_cast<size_t>(r)] = std::min(mine.streams, theirs.streams);
    if (r < rank && k[static_cast<size_t>(r)] > 1 && theirs.port == 0) {
      PTC_THROW(kPeerLost, what(r), ": it offered ", theirs.streams, " streams but no listener");
    }
    if (r < rank) boot.extra_fds[static_cast<size_t>(r)].resize(k[static_cast<size_t>(r)] - 1);
    if (r < rank && k[static_cast<size_t>(r)] > 1) {
      // Connect down now, in stripe order; the lower rank accepts after its
      // own connections, as in bootstrap.
      auto& extra = boot.extra_fds[static_cast<size_t>(r)];
      net::SockAddr a =
          net::resolve(boot.peers[static_cast<size_t>(r)].host, static_cast<uint16_t>(theirs.port));
      AuthConfig auth{secret, rank};
      for (uint32_t i = 1; i < k[static_cast<size_t>(r)]; ++i) {
        net::Fd fd = net::connect_with_retry(a, deadline, what(r));
        wire::Hello h = make_hello(wire::HelloPurpose::kData, rank, n, static_cast<uint16_t>(i),
                                   boot.peers[static_cast<size_t>(rank)].host,
                                   boot.peers[static_cast<size_t>(rank)].host_id, !secret.empty());
        connect_handshake(fd.get(), h, auth, r, deadline, what(r));
        extra[i - 1] = std::move(fd);
      }
    }
  }
  int expected = 0;
  for (int r : peers) {
    if (r > rank) expected += static_cast<int>(k[static_cast<size_t>(r)]) - 1;
  }
  if (expected == 0) return;
  // Stream i of rank r: hello.listen_port = i, each (r, i) once.
  std::set<std::pair<int, int>> seen;
  auto check = [&](const wire::Hello& h, const net::SockAddr&) -> std::string {
    if (h.purpose != static_cast<uint32_t>(wire::HelloPurpose::kData)) return "not a data hello";
    if (h.size != n || h.rank <= rank || h.rank >= n) return str_cat("unexpected rank ", h.rank);
    uint32_t want = k[static_cast<size_t>(h.rank)];
    if (h.listen_port < 1 || h.listen_port >= want) {
      return str_cat("rank ", h.rank, " opened stream ", h.listen_port, " of ", want);
    }
    if (!seen.insert({h.rank, static_cast<int>(h.listen_port)}).second) {
      return str_cat("rank ", h.rank, " opened stream ", h.listen_port, " twice");
    }
    return "";
  };
  AuthConfig auth{secret, rank};
  auto accepted = accept_peers(listener.get(), expected, auth, check, deadline,
                               str_cat("rank ", rank, "'s extra-stream listener"));
  for (int r : peers) {
    if (r > rank) boot.extra_fds[static_cast<size_t>(r)].resize(k[static_cast<size_t>(r)] - 1);
  }
  for (auto& p : accepted) {
    boot.extra_fds[static_cast<size_t>(p.hello.rank)][p.hello.listen_port - 1] = std::move(p.fd);
  }
  PTC_LOG(kInfo, expected, " extra TCP stream(s) accepted from higher ranks");
}

}  // namespace pytfcomm::tcp
