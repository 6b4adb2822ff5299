#include "transport/tcp/socket_stream.h"

#include <sys/socket.h>

#include <cerrno>

namespace pytfcomm::tcp {

ssize_t SocketStream::writev_some(const iovec* iov, int n) {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = static_cast<size_t>(n);
  ssize_t w;
  do {
    w = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (w < 0 && errno == EINTR);
  if (w < 0 && errno == EWOULDBLOCK) errno = EAGAIN;
  return w;
}

ssize_t SocketStream::read_some(void* data, size_t n) {
  ssize_t r;
  do {
    r = ::recv(fd_.get(), data, n, MSG_DONTWAIT);
  } while (r < 0 && errno == EINTR);
  if (r < 0 && errno == EWOULDBLOCK) errno = EAGAIN;
  return r;
}

ssize_t SocketStream::peek(void* data, size_t n) {
  ssize_t r;
  do {
    r = ::recv(fd_.get(), data, n, MSG_PEEK | MSG_DONTWAIT);
  } while (r < 0 && errno == EINTR);
  if (r < 0 && errno == EWOULDBLOCK) errno = EAGAIN;
  return r;
}

void SocketStream::shutdown_write() noexcept {
  if (fd_.valid()) ::shutdown(fd_.get(), SHUT_WR);
}

size_t SocketStream::unsent() const noexcept {
  return fd_.valid() ? net::unacked_bytes(fd_.get()) : 0;
}

void SocketStream::close() noexcept {
  if (!fd_.valid()) return;
  ::shutdown(fd_.get(), SHUT_RDWR);
  fd_.reset();
}

}  // namespace pytfcomm::tcp
