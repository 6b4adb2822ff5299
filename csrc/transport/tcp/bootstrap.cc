#include "transport/tcp/bootstrap.h"

#include <cstring>
#include <set>

#include "common/error.h"
#include "common/logging.h"
#include "transport/tcp/handshake.h"
#include "transport/wire.h"
#include "transport/wire_check.h"

namespace pytfcomm::tcp {
namespace {

std::string host_of(const net::SockAddr& a) {
  std::string s = a.to_string();
  auto colon = s.rfind(':');
  s = s.substr(0, colon);
  if (!s.empty() && s.front() == '[') s = s.substr(1, s.size() - 2);
  return s;
}

wire::PeerEntry make_entry(int rank, const std::string& host, uint16_t port,
                           const std::string& host_id) {
  wire::PeerEntry e{};
  e.rank = rank;
  e.port = port;
  std::strncpy(e.host, host.c_str(), wire::kMaxHost - 1);
  std::strncpy(e.host_id, host_id.c_str(), wire::kMaxHostId - 1);
  return e;
}

void send_reply_error(int fd, const std::string& msg, TimePoint deadline) {
  wire::JoinReply r{};
  r.magic = wire::kHelloMagic;
  r.status = 1;
  r.message_len = static_cast<uint32_t>(std::min<size_t>(msg.size(), wire::kMaxJoinError));
  try {
    net::write_all(fd, &r, sizeof(r), deadline, "a joining rank");
    net::write_all(fd, msg.data(), r.message_len, deadline, "a joining rank");
  } catch (const Error&) {
    // Best effort: the peer learns of the failure from the closed socket too.
  }
}

// Rank 0: collect every rank's hello, then hand everyone the address table.
BootstrapResult run_root(const transport::JobOptions& o, TimePoint deadline) {
  BootstrapResult res;
  res.fds.resize(o.size);
  res.peers.resize(o.size);
  net::SockAddr bound;
  net::Fd listener = net::listen_on(o.root_host, o.root_port, &bound);
  res.root_port = bound.port();
  res.peers[0] = {0, o.root_host, bound.port(), o.host_id};
  std::set<int> seen;
  std::vector<AcceptedPeer> joined;
  auto check = [&](const wire::Hello& h, const net::SockAddr& from) -> std::string {
    if (h.purpose != static_cast<uint32_t>(wire::HelloPurpose::kJoin)) {
      return "expected a join request on the rendezvous port";
    }
    if (h.size != o.size || h.rank == 0 || seen.count(h.rank)) {
      std::string why =
          h.size != o.size
              ? str_cat("rank ", h.rank, " at ", from.to_string(), " was started with size ",
                        h.size, " but rank 0 with size ", o.size,
                        ": start every rank with the same PYTFCOMM_SIZE / cluster spec")
              : str_cat("two processes claim rank ", h.rank, " (the second from ", from.to_string(),
                        "): give every process a distinct rank (PYTFCOMM_RANK / task index)");
      throw Error(ErrorKind::kConfig, why);
    }
    seen.insert(h.rank);
    return "";
  };
  // On a misconfigured job, tell the ranks already waiting why it cannot
  // start, then fail here too.
  auto on_fatal = [](std::vector<AcceptedPeer>& accepted, int offender, const std::string& why) {
    for (auto& p : accepted) send_reply_error(p.fd.get(), why, deadline_after(1));
    send_reply_error(offender, why, deadline_after(1));
  };
  // Only authenticated hellos reach `check`, so a stranger cannot abort the
  // job by claiming a taken rank or a wrong size.
  AuthConfig auth{o.secret, 0};
  joined = accept_peers(listener.get(), o.size - 1, auth, check, deadline, "rank 0's rendezvous",
                        on_fatal);
  std::vector<wire::PeerEntry> table(o.size);
  table[0] = make_entry(0, o.root_host, bound.port(), o.host_id);
  for (auto& p : joined) {
    const auto& h = p.hello;
    table[h.rank] =
        make_entry(h.rank, h.listen_host, static_cast<uint16_t>(h.listen_port), h.host_id);
    res.peers[h.rank] = {h.rank, h.listen_host, static_cast<uint16_t>(h.listen_port), h.host_id};
  }
  wire::JoinReply reply{};
  reply.magic = wire::kHelloMagic;
  reply.size = o.size;
  for (auto& p : joined) {
    int r = p.hello.rank;
    std::string what = str_cat("rank ", r, " (", p.from.to_string(), ")");
    net::write_all(p.fd.get(), &reply, sizeof(reply), deadline, what);
    net::write_all(p.fd.get(), table.data(), table.size() * sizeof(wire::PeerEntry), deadline,
                   what);
    res.fds[r] = std::move(p.fd);
  }
  return res;
}

BootstrapResult run_member(const transport::JobOptions& o, TimePoint deadline) {
  BootstrapResult res;
  res.fds.resize(o.size);
  net::SockAddr root = net::resolve(o.root_host, o.root_port);
  std::string root_name = str_cat("rank 0's rendezvous (", root.to_string(), ")");
  net::Fd to_root = net::connect_with_retry(root, deadline, "rank 0's rendezvous");
  std::string bind_host =
      o.bind_host.empty() ? host_of(net::local_address(to_root.get())) : o.bind_host;
  net::Fd listener;
  net::SockAddr bound;
  if (o.rank < o.size - 1) listener = net::listen_on(bind_host, 0, &bound);
  AuthConfig auth{o.secret, o.rank};
  wire::Hello hello =
      make_hello(wire::HelloPurpose::kJoin, o.rank, o.size, listener.valid() ? bound.port() : 0,
                 bind_host, o.host_id, !o.secret.empty());
  connect_handshake(to_root.get(), hello, auth, 0, deadline, root_name);
  wire::JoinReply reply{};
  net::read_all(to_root.get(), &reply, sizeof(reply), deadline, root_name);
  if (reply.magic == wire::kHelloMagic && reply.status != 0) {
    std::string msg(std::min<uint32_t>(reply.message_len, wire::kMaxJoinError), '\0');
    net::read_all(to_root.get(), msg.data(), msg.size(), deadline, root_name);
    for (char& c : msg) {
      if (static_cast<unsigned char>(c) < 0x20) c = '?';
    }
    PTC_THROW(kConfig, "rank 0 refused this rank: ", msg);
  }
  std::string why = wire::check_join_reply(reply, o.size);
  if (!why.empty()) PTC_THROW(kConfig, root_name, " ", why);
  // The table's length is our own size, checked equal to rank 0's above.
  std::vector<wire::PeerEntry> table(o.size);
  net::read_all(to_root.get(), table.data(), table.size() * sizeof(wire::PeerEntry), deadline,
                root_name);
  res.peers.resize(o.size);
  for (int r = 0; r < o.size; ++r) {
    const auto& e = table[r];
    why = wire::check_peer_entry(e, r);
    if (!why.empty()) PTC_THROW(kPeerLost, "malformed address table from ", root_name, ": ", why);
    res.peers[r] = {r, e.host, static_cast<uint16_t>(e.port), e.host_id};
  }
  res.peers[0].host = o.root_host;  // reach rank 0 the way we already do
  res.root_port = o.root_port;
  res.fds[0] = std::move(to_root);
  // Connect to every lower rank except 0 (done), then accept every higher one.
  for (int r = 1; r < o.rank; ++r) {
    net::SockAddr a = net::resolve(res.peers[r].host, res.peers[r].port);
    std::string what = str_cat("rank ", r, " (", a.to_string(), ")");
    net::Fd fd = net::connect_with_retry(a, deadline, what);
    wire::Hello h = make_hello(wire::HelloPurpose::kData, o.rank, o.size, 0, bind_host, o.host_id,
                               !o.secret.empty());
    connect_handshake(fd.get(), h, auth, r, deadline, what);
    res.fds[r] = std::move(fd);
  }
  if (o.rank < o.size - 1) {
    std::set<int> seen;
    auto check = [&](const wire::Hello& h, const net::SockAddr&) -> std::string {
      if (h.purpose != static_cast<uint32_t>(wire::HelloPurpose::kData)) return "not a data hello";
      if (h.size != o.size) return str_cat("wrong job size ", h.size);
      if (h.rank <= o.rank || seen.count(h.rank)) return str_cat("unexpected rank ", h.rank);
      seen.insert(h.rank);
      return "";
    };
    auto accepted = accept_peers(listener.get(), o.size - 1 - o.rank, auth, check, deadline,
                                 str_cat("rank ", o.rank, "'s listener"));
    for (auto& p : accepted) res.fds[p.hello.rank] = std::move(p.fd);
  }
  return res;
}

}  // namespace

BootstrapResult bootstrap(const transport::JobOptions& o) {
  PTC_CHECK_ARG(o.size >= 1, "size must be >= 1, got ", o.size);
  PTC_CHECK_ARG(o.rank >= 0 && o.rank < o.size, "rank must be in [0, ", o.size, "), got ", o.rank);
  TimePoint deadline = deadline_after(o.connect_timeout_s);
  if (o.size == 1) {
    BootstrapResult res;
    res.fds.resize(1);
    res.peers.push_back({0, o.root_host, o.root_port, o.host_id});
    return res;
  }
  return o.rank == 0 ? run_root(o, deadline) : run_member(o, deadline);
}

}  // namespace pytfcomm::tcp
