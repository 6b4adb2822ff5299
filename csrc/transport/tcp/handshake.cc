#include "transport/tcp/handshake.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "common/error.h"
#include "common/logging.h"

namespace pytfcomm::tcp {
namespace {

// A connection still sending its hello. Each has a deadline of its own so
// that a slow or silent client cannot hold up the rest.
struct Pending {
  Fd fd;
  SockAddr from;
  wire::Hello hello{};
  size_t got = 0;
  TimePoint deadline;
};

constexpr double kHelloSeconds = 10.0;

}  // namespace

wire::Hello make_hello(wire::HelloPurpose purpose, int rank, int size, uint16_t listen_port,
                       const std::string& listen_host, const std::string& host_id) {
  wire::Hello h{};
  h.magic = wire::kHelloMagic;
  h.version = wire::kProtocolVersion;
  h.purpose = static_cast<uint32_t>(purpose);
  h.rank = rank;
  h.size = size;
  h.listen_port = listen_port;
  std::random_device rd;
  for (auto& b : h.nonce) b = static_cast<uint8_t>(rd());
  std::strncpy(h.listen_host, listen_host.c_str(), wire::kMaxHost - 1);
  std::strncpy(h.host_id, host_id.c_str(), wire::kMaxHostId - 1);
  return h;
}

std::string validate_hello(const wire::Hello& h) {
  if (h.magic != wire::kHelloMagic) return "not a pytfcomm connection (bad magic number)";
  if (h.version != wire::kProtocolVersion) {
    return str_cat("protocol version ", h.version, " but this build speaks ",
                   wire::kProtocolVersion, " (mixed pytfcomm versions in one job?)");
  }
  if (h.purpose != static_cast<uint32_t>(wire::HelloPurpose::kJoin) &&
      h.purpose != static_cast<uint32_t>(wire::HelloPurpose::kData)) {
    return str_cat("unknown connection purpose ", h.purpose);
  }
  if (std::memchr(h.listen_host, 0, wire::kMaxHost) == nullptr ||
      std::memchr(h.host_id, 0, wire::kMaxHostId) == nullptr) {
    return "unterminated string in hello";
  }
  if (h.size < 1 || h.rank < 0 || h.rank >= h.size) {
    return str_cat("impossible rank ", h.rank, " of size ", h.size);
  }
  if (h.listen_port > 65535) return "bad port";
  return "";
}

std::vector<AcceptedPeer> accept_peers(int listener, int count, const HelloCheck& check,
                                       TimePoint deadline, const std::string& what,
                                       const FatalHook& on_fatal) {
  std::vector<AcceptedPeer> done;
  std::vector<Pending> pending;
  while (static_cast<int>(done.size()) < count) {
    auto now = Clock::now();
    if (now >= deadline) {
      PTC_THROW(kTimeout, "timed out waiting for ", count - static_cast<int>(done.size()),
                " more rank(s) to connect to ", what,
                "; are all ranks started with the same size and rendezvous address? (raise "
                "PYTFCOMM_CONNECT_TIMEOUT if they start far apart)");
    }
    // Drop handshakes past their own deadline.
    for (size_t i = 0; i < pending.size();) {
      if (now >= pending[i].deadline) {
        PTC_LOG(kWarn, "dropping connection from ", pending[i].from.to_string(), " to ", what,
                ": no complete hello within ", kHelloSeconds, " s");
        pending.erase(pending.begin() + static_cast<long>(i));
      } else {
        ++i;
      }
    }
    std::vector<pollfd> pfds;
    pfds.push_back({listener, POLLIN, 0});
    for (auto& p : pending) pfds.push_back({p.fd.get(), POLLIN, 0});
    int rc = ::poll(pfds.data(), pfds.size(), millis_until(deadline, 100));
    if (rc < 0 && errno != EINTR) PTC_THROW(kInternal, "poll failed: ", std::strerror(errno));
    if (rc <= 0) continue;
    if (pfds[0].revents & POLLIN) {
      for (int i = 0; i < 64; ++i) {  // drain the backlog, bounded
        Pending p;
        p.fd = accept_one(listener, &p.from);
        if (!p.fd.valid()) break;
        p.deadline = std::min(deadline, deadline_after(kHelloSeconds));
        pending.push_back(std::move(p));
      }
    }
    for (size_t i = 0; i < pending.size();) {
      Pending& p = pending[i];
      auto* dst = reinterpret_cast<char*>(&p.hello) + p.got;
      ssize_t r = ::recv(p.fd.get(), dst, sizeof(wire::Hello) - p.got, 0);
      std::string drop;
      if (r > 0) {
        p.got += static_cast<size_t>(r);
        // Reject a wrong magic as soon as its 8 bytes are in.
        if (p.got >= sizeof(uint64_t) && p.hello.magic != wire::kHelloMagic) {
          drop = "not a pytfcomm connection (bad magic number)";
        } else if (p.got == sizeof(wire::Hello)) {
          drop = validate_hello(p.hello);
          if (drop.empty()) {
            try {
              drop = check(p.hello, p.from);
            } catch (const Error& e) {
              if (e.kind() == ErrorKind::kConfig && on_fatal) on_fatal(done, p.fd.get(), e.what());
              throw;
            }
          }
          if (drop.empty()) {
            done.push_back({std::move(p.fd), p.hello, p.from});
            pending.erase(pending.begin() + static_cast<long>(i));
            continue;
          }
        }
      } else if (r == 0) {
        drop = "closed before completing its hello";
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        drop = std::strerror(errno);
      }
      if (!drop.empty()) {
        PTC_LOG(kWarn, "refused connection from ", p.from.to_string(), " to ", what, ": ", drop);
        pending.erase(pending.begin() + static_cast<long>(i));
        continue;
      }
      ++i;
    }
  }
  return done;
}

}  // namespace pytfcomm::tcp
