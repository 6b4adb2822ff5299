// A TCP stream that can empty the kernel's receive queue into memory while
// this rank has nothing posted to receive into (it waits for a send, or is
// behind its peer). Loopback TCP on the kernels measured here went into loss
// recovery when a receive queue sat full and unread while its owner waited
// to send the other way: packets were pruned, retransmissions backed off to
// minutes, and both ranks stalled until the deadline (docs/transports.md).
// Reading ahead keeps every queue drained, so that never starts. Bytes come
// out in order: first what was read ahead, then the socket.
#pragma once

#include <memory>
#include <vector>

#include "transport/stream.h"

namespace pytfcomm::tcp {

class ReadAheadStream : public transport::ByteStream, public transport::ReadAheadCapable {
 public:
  ReadAheadStream(std::unique_ptr<transport::ByteStream> inner, size_t cap);

  // Reads what the stream holds, up to `cap` bytes in memory; true if any.
  bool read_ahead() noexcept override;
  size_t buffered() const { return tail_ - head_; }

  ssize_t writev_some(const iovec* iov, int n) override { return inner_->writev_some(iov, n); }
  ssize_t read_some(void* data, size_t n) override;
  ssize_t peek(void* data, size_t n) override;
  void close() noexcept override { inner_->close(); }
  int liveness_fd() const override { return inner_->liveness_fd(); }
  std::vector<int> event_fds() const override { return inner_->event_fds(); }
  // The inner stream's, and reading ahead (writes go straight to it).
  transport::StreamFeatures features() override {
    transport::StreamFeatures f = inner_->features();
    f.read_ahead = this;
    return f;
  }

 private:
  std::unique_ptr<transport::ByteStream> inner_;
  size_t cap_;
  std::vector<char> buf_;  // [head_, tail_) unread, grown on demand up to cap_
  size_t head_ = 0, tail_ = 0;
  // What the stream said after the bytes read ahead (0: EOF, -1: errno).
  bool ended_ = false;
  ssize_t end_rc_ = 0;
  int end_errno_ = 0;
};

}  // namespace pytfcomm::tcp
