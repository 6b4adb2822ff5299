#include "transport/tcp/striped_stream.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "common/error.h"

namespace pytfcomm::tcp {
namespace {

constexpr int kMaxIov = 64;

ssize_t send_iov(int fd, iovec* iov, int n) {
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = static_cast<size_t>(n);
  ssize_t w;
  do {
    w = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (w < 0 && errno == EINTR);
  if (w < 0 && errno == EWOULDBLOCK) errno = EAGAIN;
  return w;
}

ssize_t recv_flags(int fd, void* data, size_t n, int flags) {
  ssize_t r;
  do {
    r = ::recv(fd, data, n, flags | MSG_DONTWAIT);
  } while (r < 0 && errno == EINTR);
  if (r < 0 && errno == EWOULDBLOCK) errno = EAGAIN;
  return r;
}

// The first `limit` bytes of iov[0..n) as an iovec list in `out`.
int clip(const iovec* iov, int n, size_t limit, iovec* out) {
  int m = 0;
  for (int i = 0; i < n && limit > 0 && m < kMaxIov; ++i) {
    if (iov[i].iov_len == 0) continue;
    size_t len = std::min(iov[i].iov_len, limit);
    out[m++] = {iov[i].iov_base, len};
    limit -= len;
  }
  return m;
}

}  // namespace

StripedStream::StripedStream(std::vector<net::Fd> fds, size_t stripe_bytes)
    : fds_(std::move(fds)), stripe_(stripe_bytes), out_{0, stripe_bytes}, in_{0, stripe_bytes} {
  PTC_ENFORCE(!fds_.empty() && stripe_ > 0, "a striped stream needs connections and a stripe");
}

void StripedStream::advance(Cursor& c, size_t moved) const {
  c.left -= moved;
  if (c.left == 0) {
    c.conn = (c.conn + 1) % fds_.size();
    c.left = stripe_;
  }
}

std::vector<int> StripedStream::event_fds() const {
  std::vector<int> out;
  for (const net::Fd& f : fds_) out.push_back(f.get());
  return out;
}

ssize_t StripedStream::writev_some(const iovec* iov, int n) {
  // Fill stripe after stripe until a connection's buffer is full.
  iovec rest[kMaxIov], part[kMaxIov];
  int m = 0;
  for (int i = 0; i < n && m < kMaxIov; ++i) {
    if (iov[i].iov_len > 0) rest[m++] = iov[i];
  }
  size_t total = 0;
  while (m > 0) {
    int k = clip(rest, m, out_.left, part);
    size_t asked = 0;
    for (int i = 0; i < k; ++i) asked += part[i].iov_len;
    ssize_t w = send_iov(fds_[out_.conn].get(), part, k);
    if (w < 0) return total > 0 ? static_cast<ssize_t>(total) : -1;
    auto moved = static_cast<size_t>(w);
    total += moved;
    advance(out_, moved);
    // Drop what was sent from the front of `rest`.
    int first = 0;
    while (first < m && moved >= rest[first].iov_len) moved -= rest[first++].iov_len;
    if (first < m) {
      rest[first].iov_base = static_cast<char*>(rest[first].iov_base) + moved;
      rest[first].iov_len -= moved;
    }
    std::copy(rest + first, rest + m, rest);
    m -= first;
    if (static_cast<size_t>(w) < asked) break;  // that connection's buffer is full
  }
  return static_cast<ssize_t>(total);
}

ssize_t StripedStream::read_some(void* data, size_t n) {
  size_t total = 0;
  auto* p = static_cast<char*>(data);
  while (total < n) {
    size_t want = std::min(n - total, in_.left);
    ssize_t r = recv_flags(fds_[in_.conn].get(), p + total, want, 0);
    if (r <= 0) return total > 0 ? static_cast<ssize_t>(total) : r;
    total += static_cast<size_t>(r);
    advance(in_, static_cast<size_t>(r));
    if (static_cast<size_t>(r) < want) break;  // nothing more there now
  }
  return static_cast<ssize_t>(total);
}

ssize_t StripedStream::peek(void* data, size_t n) {
  // Across a stripe boundary the rest lies at the start of the next
  // connection: peek there too, without moving either cursor. A peek always
  // starts at a connection's first unread byte, so each connection can be
  // visited once (the frame headers peeked at are far smaller than that).
  size_t total = 0;
  Cursor c = in_;
  auto* p = static_cast<char*>(data);
  for (size_t hops = 0; total < n && hops < fds_.size(); ++hops) {
    size_t want = std::min(n - total, c.left);
    ssize_t r = recv_flags(fds_[c.conn].get(), p + total, want, MSG_PEEK);
    if (r <= 0) return total > 0 ? static_cast<ssize_t>(total) : r;
    total += static_cast<size_t>(r);
    if (static_cast<size_t>(r) < c.left) break;
    advance(c, static_cast<size_t>(r));
  }
  return static_cast<ssize_t>(total);
}

void StripedStream::shutdown_write() noexcept {
  for (net::Fd& f : fds_) {
    if (f.valid()) ::shutdown(f.get(), SHUT_WR);
  }
}

size_t StripedStream::unsent() const noexcept {
  size_t n = 0;
  for (const net::Fd& f : fds_) n += f.valid() ? net::unacked_bytes(f.get()) : 0;
  return n;
}

void StripedStream::close() noexcept {
  for (net::Fd& f : fds_) {
    if (!f.valid()) continue;
    ::shutdown(f.get(), SHUT_RDWR);
    f.reset();
  }
}

}  // namespace pytfcomm::tcp
