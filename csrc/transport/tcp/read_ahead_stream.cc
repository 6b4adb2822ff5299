#include "transport/tcp/read_ahead_stream.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace pytfcomm::tcp {

ReadAheadStream::ReadAheadStream(std::unique_ptr<transport::ByteStream> inner, size_t cap)
    : inner_(std::move(inner)), cap_(cap) {}

bool ReadAheadStream::read_ahead() noexcept {
  if (ended_) return false;
  if (head_ == tail_) head_ = tail_ = 0;
  if (head_ > 0 && tail_ == buf_.size()) {  // slide the unread bytes to the front
    std::memmove(buf_.data(), buf_.data() + head_, tail_ - head_);
    tail_ -= head_;
    head_ = 0;
  }
  bool moved = false;
  while (tail_ < cap_) {
    if (tail_ == buf_.size()) {
      try {
        buf_.resize(std::min(cap_, std::max<size_t>(buf_.size() * 2, 64 << 10)));
      } catch (...) {
        return moved;  // no memory for more: the kernel keeps the rest
      }
    }
    ssize_t r = inner_->read_some(buf_.data() + tail_, buf_.size() - tail_);
    if (r > 0) {
      tail_ += static_cast<size_t>(r);
      moved = true;
      continue;
    }
    if (r < 0 && errno == EAGAIN) break;
    ended_ = true;  // EOF or an error: reported once the buffer is read
    end_rc_ = r;
    end_errno_ = errno;
    break;
  }
  return moved;
}

ssize_t ReadAheadStream::read_some(void* data, size_t n) {
  if (head_ == tail_) {
    if (!ended_) return inner_->read_some(data, n);
    errno = end_errno_;
    return end_rc_;
  }
  size_t k = std::min(n, tail_ - head_);
  std::memcpy(data, buf_.data() + head_, k);
  head_ += k;
  return static_cast<ssize_t>(k);
}

ssize_t ReadAheadStream::peek(void* data, size_t n) {
  size_t k = std::min(n, tail_ - head_);
  if (k > 0) std::memcpy(data, buf_.data() + head_, k);
  if (k == n || ended_) {
    if (k > 0) return static_cast<ssize_t>(k);
    errno = end_errno_;
    return end_rc_;
  }
  ssize_t r = inner_->peek(static_cast<char*>(data) + k, n - k);
  if (r > 0) return static_cast<ssize_t>(k) + r;
  return k > 0 ? static_cast<ssize_t>(k) : r;
}

}  // namespace pytfcomm::tcp
