// Thin RAII and helper layer over BSD sockets: every system call is checked,
// EINTR is retried, and every blocking step takes a deadline. Neutral ground:
// the TCP streams use it, and so does shared memory (its setup talks over the
// bootstrap connections, which then stay open as its liveness signal).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/clock.h"

namespace pytfcomm::net {

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset();

 private:
  int fd_ = -1;
};

struct SockAddr {
  sockaddr_storage storage{};
  socklen_t len = 0;
  int family() const { return storage.ss_family; }
  std::string to_string() const;  // "1.2.3.4:5" or "[::1]:5"
  uint16_t port() const;
};

// Resolve a numeric address or a host name (no service lookup).
SockAddr resolve(const std::string& host, uint16_t port);

// A listening socket bound to exactly `host` (port 0: any free port).
Fd listen_on(const std::string& host, uint16_t port, SockAddr* bound);

// Connect, retrying refused/unreachable attempts with backoff until the
// deadline. `what` names the target in the error ("rank 0's rendezvous").
Fd connect_with_retry(const SockAddr& addr, TimePoint deadline, const std::string& what);

// Accept one pending connection (listener is non-blocking); invalid Fd if
// none. `*shortage` is the errno when the process or the kernel ran out of
// descriptors or memory for it (see out_of_resources), else 0: the connection
// then stays queued and the listener stays readable, so waiting on it spins.
Fd accept_one(int listener, SockAddr* peer, int* shortage);

// EMFILE, ENFILE, ENOBUFS or ENOMEM: a call failed for want of descriptors or
// kernel memory, not because of the peer.
bool out_of_resources(int err);
// The error for such an `err` while `doing` ("accepting connections to ..."):
// what ran out, the limit (the process's `ulimit -n` for EMFILE) and what to do.
std::string resource_shortage(int err, const std::string& doing);

// Blocking-with-deadline exact reads/writes for the handshake phase.
// Throw kPeerLost on EOF/reset, kTimeout at the deadline.
void write_all(int fd, const void* data, size_t n, TimePoint deadline, const std::string& what);
void read_all(int fd, void* data, size_t n, TimePoint deadline, const std::string& what);

void set_nonblocking(int fd);
// TCP_NODELAY, SO_SNDBUF/SO_RCVBUF (0 keeps the kernel's autotuning), keepalive,
// retransmissions at least once a second (docs/reliability.md).
void tune_data_socket(int fd, int64_t buffer_bytes);

// Bytes written to a connected TCP socket that the peer's kernel has not
// acknowledged yet (TIOCOUTQ); 0 once the connection was reset (the rest will
// never go) or on error. At 0 everything sits in the peer's receive queue,
// where even a reset from our close() no longer drops it.
size_t unacked_bytes(int fd) noexcept;

// Local address the kernel used for a connected socket.
SockAddr local_address(int fd);

}  // namespace pytfcomm::net
