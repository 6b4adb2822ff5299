// ByteStream over several TCP connections to one peer. The byte sequence is
// cut into fixed stripes dealt round-robin: stripe i travels on connection
// i % k, so both ends know where the next byte is without any framing of
// their own. On a link whose single flow is limited by its window (a long
// round trip) or by one core's softirq work, k flows carry up to k times as
// much; in-order delivery is kept because the reader drains stripe i
// completely before it moves on. Each connection keeps its own socket
// buffers, so data for later stripes waits in the kernel meanwhile.
#pragma once

#include <vector>

#include "transport/net/socket.h"
#include "transport/stream.h"

namespace pytfcomm::tcp {

class StripedStream : public transport::ByteStream, public transport::HalfCloseStream {
 public:
  // fds[0] is the connection bootstrap made (liveness); at least one.
  StripedStream(std::vector<net::Fd> fds, size_t stripe_bytes);

  ssize_t writev_some(const iovec* iov, int n) override;
  ssize_t read_some(void* data, size_t n) override;
  ssize_t peek(void* data, size_t n) override;
  void close() noexcept override;
  void shutdown_write() noexcept override;
  size_t unsent() const noexcept override;
  int liveness_fd() const override { return fds_.front().get(); }
  std::vector<int> event_fds() const override;
  transport::StreamFeatures features() override {
    transport::StreamFeatures f;
    f.half_close = this;
    return f;
  }

 private:
  // Where the next byte of one direction goes: connection and room left in
  // its stripe.
  struct Cursor {
    size_t conn = 0;
    size_t left;
  };
  void advance(Cursor& c, size_t moved) const;

  std::vector<net::Fd> fds_;
  size_t stripe_;
  Cursor out_, in_;
};

}  // namespace pytfcomm::tcp
