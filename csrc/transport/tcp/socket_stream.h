// ByteStream over a connected non-blocking TCP socket.
#pragma once

#include "transport/net/socket.h"
#include "transport/stream.h"

namespace pytfcomm::tcp {

class SocketStream : public transport::ByteStream, public transport::HalfCloseStream {
 public:
  explicit SocketStream(net::Fd fd) : fd_(std::move(fd)) {}

  ssize_t writev_some(const iovec* iov, int n) override;
  ssize_t read_some(void* data, size_t n) override;
  ssize_t peek(void* data, size_t n) override;
  void close() noexcept override;
  int liveness_fd() const override { return fd_.get(); }
  transport::StreamFeatures features() override {
    transport::StreamFeatures f;
    f.half_close = this;
    return f;
  }
  void shutdown_write() noexcept override;
  size_t unsent() const noexcept override;

 private:
  net::Fd fd_;
};

}  // namespace pytfcomm::tcp
