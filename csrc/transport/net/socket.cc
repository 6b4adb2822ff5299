#include "transport/net/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/error.h"
#include "common/interrupt.h"
#include "common/logging.h"

namespace pytfcomm::net {

void Fd::reset() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

std::string SockAddr::to_string() const {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (family() == AF_INET) {
    auto* a = reinterpret_cast<const sockaddr_in*>(&storage);
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
    return str_cat(buf, ":", ntohs(a->sin_port));
  }
  if (family() == AF_INET6) {
    auto* a = reinterpret_cast<const sockaddr_in6*>(&storage);
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
    return str_cat("[", buf, "]:", ntohs(a->sin6_port));
  }
  return "<unknown address>";
}

uint16_t SockAddr::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (family() == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return 0;
}

SockAddr resolve(const std::string& host, uint16_t port) {
  std::string h = host;
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h.empty()) PTC_THROW(kConfig, "empty host name in an address");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(h.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    PTC_THROW(kConfig, "cannot resolve host '", h, "': ", gai_strerror(rc),
              "; check the address in PYTFCOMM_ADDR / TF_CONFIG");
  }
  SockAddr out;
  // Prefer IPv4 when a name has both, as TF's own servers do.
  addrinfo* pick = res;
  for (addrinfo* p = res; p; p = p->ai_next) {
    if (p->ai_family == AF_INET) {
      pick = p;
      break;
    }
  }
  std::memcpy(&out.storage, pick->ai_addr, pick->ai_addrlen);
  out.len = pick->ai_addrlen;
  freeaddrinfo(res);
  if (out.family() == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&out.storage)->sin_port = htons(port);
  } else {
    reinterpret_cast<sockaddr_in6*>(&out.storage)->sin6_port = htons(port);
  }
  return out;
}

size_t unacked_bytes(int fd) noexcept {
  tcp_info info{};
  socklen_t len = sizeof(info);
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 && info.tcpi_state == TCP_CLOSE) {
    return 0;
  }
  int n = 0;
  if (::ioctl(fd, TIOCOUTQ, &n) != 0) return 0;
  return n > 0 ? static_cast<size_t>(n) : 0;
}

void set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    PTC_THROW(kInternal, "fcntl(O_NONBLOCK) failed: ", std::strerror(errno));
  }
}

namespace {

// TCP_RTO_MAX_MS (Linux 6.15; older headers lack the name).
constexpr int kTcpRtoMaxMs = 44;
// TCP retransmits with exponential backoff: after a blackout of 8 s the next
// try of a connection that lost its first packet at 0 s is due at 12.6 s
// (0.2 s doubled each time), so a path back at 8 s stays silent past
// PYTFCOMM_PEER_TIMEOUT's 10 s and the peer is declared lost. Capping the
// retransmission timeout at a second (the kernel's smallest cap) makes the
// first packet after the heal arrive within a second of it, so outages
// shorter than the peer timeout minus about a second are survived
// (docs/reliability.md). The cap also shortens the kernel's own give-up time
// (tcp_retries2 retries of at most a second: about 16 s), so the time unacked
// data may wait is set back to what it was without the cap (tcp_retries2 = 15
// with doubling from 0.2 s to 120 s: 924.6 s); the peer timeout stays what
// decides.
constexpr int kRtoMaxMs = 1000;
constexpr unsigned kUnackedMs = 924'600;

void bound_retransmission(int fd) {
  if (setsockopt(fd, IPPROTO_TCP, kTcpRtoMaxMs, &kRtoMaxMs, sizeof(kRtoMaxMs)) != 0) {
    static std::once_flag once;
    std::call_once(once, [] {
      PTC_LOG(kInfo,
              "this kernel cannot cap TCP's retransmission timeout (TCP_RTO_MAX_MS, "
              "Linux 6.15+): network outages of a few seconds less than "
              "PYTFCOMM_PEER_TIMEOUT can still lose the peer (docs/reliability.md)");
    });
    return;
  }
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &kUnackedMs, sizeof(kUnackedMs));
}

}  // namespace

void tune_data_socket(int fd, int64_t buffer_bytes) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  bound_retransmission(fd);
  if (buffer_bytes > 0) {
    int b = static_cast<int>(buffer_bytes);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof(b));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof(b));
  }
}

Fd listen_on(const std::string& host, uint16_t port, SockAddr* bound) {
  SockAddr addr = resolve(host, port);
  Fd fd(::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) PTC_THROW(kInternal, "socket() failed: ", std::strerror(errno));
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr.storage), addr.len) != 0) {
    int err = errno;
    if (err == EADDRINUSE) {
      PTC_THROW(kConfig, "cannot listen on ", addr.to_string(),
                ": the port is already in use (another job or a stale process?); pick another "
                "port in PYTFCOMM_ADDR / PYTFCOMM_PORT or stop the process holding it");
    }
    if (err == EADDRNOTAVAIL) {
      PTC_THROW(kConfig, "cannot listen on ", addr.to_string(),
                ": that address is not on this machine; check the host in PYTFCOMM_ADDR, "
                "PYTFCOMM_BIND_HOST or TF_CONFIG for this rank");
    }
    PTC_THROW(kConfig, "cannot listen on ", addr.to_string(), ": ", std::strerror(err));
  }
  if (::listen(fd.get(), 1024) != 0) {
    PTC_THROW(kInternal, "listen() on ", addr.to_string(), " failed: ", std::strerror(errno));
  }
  set_nonblocking(fd.get());
  if (bound) {
    bound->len = sizeof(bound->storage);
    getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound->storage), &bound->len);
  }
  return fd;
}

Fd connect_with_retry(const SockAddr& addr, TimePoint deadline, const std::string& what) {
  auto backoff = std::chrono::milliseconds(5);
  std::string last = "no attempt";
  for (;;) {
    poll_interrupt();
    Fd fd(::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid() && out_of_resources(errno)) {
      PTC_THROW(kConfig, resource_shortage(errno, str_cat("connecting to ", what)));
    }
    if (!fd.valid()) PTC_THROW(kInternal, "socket() failed: ", std::strerror(errno));
    int rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr.storage), addr.len);
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      pollfd p{fd.get(), POLLOUT, 0};
      int pr;
      do {
        pr = ::poll(&p, 1, millis_until(deadline, 100));
        if (pr == 0 && Clock::now() < deadline) {
          poll_interrupt();
          pr = -1;
          errno = EINTR;  // not connected yet: poll again
        }
      } while (pr < 0 && errno == EINTR);
      if (pr > 0) {
        socklen_t len = sizeof(err);
        getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      } else {
        err = ETIMEDOUT;
      }
    }
    if (err == 0) return fd;
    last = std::strerror(err);
    if (Clock::now() + backoff >= deadline) {
      PTC_THROW(kTimeout, "could not connect to ", what, " at ", addr.to_string(),
                " before the connect deadline (last error: ", last,
                "); check that it is running and reachable, the address/port are right, and "
                "raise PYTFCOMM_CONNECT_TIMEOUT if ranks start far apart");
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(250));
  }
}

bool out_of_resources(int err) {
  return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
}

std::string resource_shortage(int err, const std::string& doing) {
  if (err == EMFILE) {
    rlimit lim{};
    getrlimit(RLIMIT_NOFILE, &lim);
    std::string n =
        lim.rlim_cur == RLIM_INFINITY ? std::string("unlimited") : std::to_string(lim.rlim_cur);
    return str_cat("out of file descriptors (EMFILE) ", doing, ": the process's limit is ", n,
                   " (ulimit -n); raise it (ulimit -n, or the launcher's / container's "
                   "nofile limit)");
  }
  if (err == ENFILE) {
    return str_cat("the system is out of file descriptors (ENFILE) ", doing,
                   ": every process together holds the kernel's limit (fs.file-max); close "
                   "files elsewhere or raise it");
  }
  return str_cat("the kernel is out of memory for sockets (", err == ENOBUFS ? "ENOBUFS" : "ENOMEM",
                 ") ", doing,
                 ": free memory on this host (or raise net.ipv4.tcp_mem) and "
                 "start the job again");
}

Fd accept_one(int listener, SockAddr* peer, int* shortage) {
  SockAddr a;
  a.len = sizeof(a.storage);
  int fd;
  do {
    fd = ::accept4(listener, reinterpret_cast<sockaddr*>(&a.storage), &a.len,
                   SOCK_CLOEXEC | SOCK_NONBLOCK);
  } while (fd < 0 && errno == EINTR);
  *shortage = fd < 0 && out_of_resources(errno) ? errno : 0;
  if (fd < 0) return Fd();
  if (peer) *peer = a;
  return Fd(fd);
}

static void wait_fd(int fd, short events, TimePoint deadline, const std::string& what) {
  for (;;) {
    poll_interrupt();
    if (Clock::now() >= deadline) {
      PTC_THROW(kTimeout, "timed out during the handshake with ", what,
                "; the peer is not answering (raise PYTFCOMM_CONNECT_TIMEOUT if it is slow "
                "to start)");
    }
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, millis_until(deadline, 200));
    if (rc > 0) return;
    if (rc < 0 && errno != EINTR) PTC_THROW(kInternal, "poll failed: ", std::strerror(errno));
  }
}

void write_all(int fd, const void* data, size_t n, TimePoint deadline, const std::string& what) {
  auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
    } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      wait_fd(fd, POLLOUT, deadline, what);
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else {
      PTC_THROW(kPeerLost, "connection to ", what,
                " failed while sending: ", w == 0 ? "closed" : std::strerror(errno));
    }
  }
}

void read_all(int fd, void* data, size_t n, TimePoint deadline, const std::string& what) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
    } else if (r == 0) {
      PTC_THROW(kPeerLost, what, " closed the connection during the handshake");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_fd(fd, POLLIN, deadline, what);
    } else if (errno != EINTR) {
      PTC_THROW(kPeerLost, "connection to ", what,
                " failed while receiving: ", std::strerror(errno));
    }
  }
}

SockAddr local_address(int fd) {
  SockAddr a;
  a.len = sizeof(a.storage);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a.storage), &a.len) != 0) {
    PTC_THROW(kInternal, "getsockname failed: ", std::strerror(errno));
  }
  return a;
}

}  // namespace pytfcomm::net
