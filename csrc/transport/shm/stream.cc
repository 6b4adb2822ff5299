#include "transport/shm/stream.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "transport/wire_check.h"

namespace pytfcomm::shm {
namespace {

// Largest payload one record carries (the tag holds 32 bits of length).
constexpr uint64_t kMaxRecord = uint64_t{1} << 30;

// Copy between a linear buffer and a ring position, wrapping once if needed.
void copy_to_ring(const RingView& r, uint64_t pos, const void* src, size_t n) {
  size_t at = static_cast<size_t>(pos & (r.bytes - 1));
  size_t first = std::min<size_t>(n, r.bytes - at);
  std::memcpy(r.data + at, src, first);
  if (first < n) std::memcpy(r.data, static_cast<const char*>(src) + first, n - first);
}

void copy_from_ring(const RingView& r, uint64_t pos, void* dst, size_t n) {
  size_t at = static_cast<size_t>(pos & (r.bytes - 1));
  size_t first = std::min<size_t>(n, r.bytes - at);
  std::memcpy(dst, r.data + at, first);
  if (first < n) std::memcpy(static_cast<char*>(dst) + first, r.data, n - first);
}

}  // namespace

ShmStream::ShmStream(RingView in, RingView out, Doorbell peer_bell, net::Fd liveness,
                     ByReference ref)
    : in_(std::move(in)),
      out_(std::move(out)),
      peer_bell_(peer_bell),
      sock_(std::move(liveness)),
      ref_(ref) {}

uint64_t ShmStream::readable() {
  if (in_head_seen_ == in_tail_) {
    uint64_t head = in_.ctl->head.load(std::memory_order_acquire);
    // The peer's process writes this counter: never trust it past the ring.
    if (head - in_tail_ > in_.bytes) {
      corrupt_ = true;
      return 0;
    }
    in_head_seen_ = head;
  }
  return in_head_seen_ - in_tail_;
}

uint64_t ShmStream::writable() {
  uint64_t tail = out_.ctl->tail.load(std::memory_order_acquire);
  if (out_head_ - tail > out_.bytes) {
    corrupt_ = true;
    return 0;
  }
  // The consumer may stop mid-record; round down so room stays a multiple of
  // 8 and records stay aligned.
  out_tail_seen_ = tail & ~uint64_t{7};
  return out_.bytes - (out_head_ - out_tail_seen_);
}

void ShmStream::consume(uint64_t bytes) { in_tail_ += bytes; }

bool ShmStream::next_record() {
  if (rec_left_ > 0) return true;
  uint64_t avail = readable();
  if (avail == 0) return false;
  // Records are published whole, so a tag is never cut short.
  uint64_t tag = 0;
  if (avail < kTagBytes) return corrupt_ = true, false;
  copy_from_ring(in_, in_tail_, &tag, kTagBytes);
  uint64_t len = tag & 0xffffffffu;
  bool by_ref = (tag & kByReference) != 0;
  if ((tag >> 33) != 0 || len == 0 || len > kMaxRecord) return corrupt_ = true, false;
  if (by_ref) {
    if (avail < 2 * kTagBytes || ref_.peer_pid == 0) return corrupt_ = true, false;
    copy_from_ring(in_, in_tail_ + kTagBytes, &rec_addr_, sizeof(rec_addr_));
    consume(2 * kTagBytes);
    rec_pad_ = 0;
  } else {
    if (kTagBytes + pad8(len) > avail) return corrupt_ = true, false;
    consume(kTagBytes);
    rec_pad_ = pad8(len) - len;
  }
  rec_left_ = len;
  rec_ref_ = by_ref;
  return true;
}

ssize_t ShmStream::writev_some(const iovec* iov, int n) {
  if (closed_ || peer_gone_) {
    errno = EPIPE;
    return -1;
  }
  uint64_t need = 0;
  for (int i = 0; i < n; ++i) need += kTagBytes * 2 + iov[i].iov_len;
  uint64_t room = out_.bytes - (out_head_ - out_tail_seen_);
  if (room < need) room = writable();
  if (corrupt_) {
    errno = EPROTO;
    return -1;
  }
  size_t wrote = 0;
  for (int i = 0; i < n; ++i) {
    uint64_t len = iov[i].iov_len;
    if (len == 0) continue;
    if (room < 2 * kTagBytes) break;
    uint64_t k = std::min(len, kMaxRecord);
    if (send_by_ref_ && len >= kMinByReference) {
      uint64_t rec[2] = {k | kByReference, reinterpret_cast<uint64_t>(iov[i].iov_base)};
      copy_to_ring(out_, out_head_, rec, sizeof(rec));
      out_head_ += sizeof(rec);
      room -= sizeof(rec);
      ref_posted_ += k;
    } else {
      k = std::min(k, room - kTagBytes);  // room is a multiple of 8
      copy_to_ring(out_, out_head_, &k, kTagBytes);
      copy_to_ring(out_, out_head_ + kTagBytes, iov[i].iov_base, k);
      out_head_ += kTagBytes + pad8(k);
      room -= kTagBytes + pad8(k);
    }
    wrote += k;
    if (k < len) break;
  }
  if (wrote == 0) {
    errno = EAGAIN;
    return -1;
  }
  out_.ctl->head.store(out_head_, std::memory_order_release);
  peer_bell_.ring();
  return static_cast<ssize_t>(wrote);
}

void ShmStream::set_collective_bytes(uint64_t bytes) noexcept {
  send_by_ref_ = ref_.send_from > 0 && bytes >= ref_.send_from;
}

ssize_t ShmStream::read_some(void* data, size_t n) {
  if (closed_) {
    errno = EBADF;
    return -1;
  }
  if (!next_record()) {
    if (corrupt_) {
      errno = EPROTO;
      return -1;
    }
    if (peer_gone_) return 0;  // everything it wrote before dying has been read
    errno = EAGAIN;
    return -1;
  }
  size_t k = static_cast<size_t>(std::min<uint64_t>(n, rec_left_));
  if (!rec_ref_) {
    copy_from_ring(in_, in_tail_, data, k);
    consume(k);
    rec_left_ -= k;
    if (rec_left_ == 0) consume(rec_pad_);
  } else {
    if (peer_gone_) {
      // It gave up on this send and may have reused the memory: do not copy.
      errno = EPIPE;
      return -1;
    }
    iovec local{data, k};
    iovec remote{reinterpret_cast<void*>(rec_addr_), k};
    ssize_t r;
    do {
      r = ::process_vm_readv(ref_.peer_pid, &local, 1, &remote, 1, 0);
    } while (r < 0 && errno == EINTR);
    if (r <= 0) {
      if (r == 0) errno = EFAULT;
      int err = errno;
      in_.ctl->tail.store(in_tail_, std::memory_order_release);
      errno = err == ESRCH ? EPIPE : err;  // ESRCH: the peer process is gone
      return -1;
    }
    k = static_cast<size_t>(r);
    rec_addr_ += k;
    rec_left_ -= k;
    ref_received_ += k;
    in_.ctl->released.store(ref_received_, std::memory_order_release);
  }
  in_.ctl->tail.store(in_tail_, std::memory_order_release);
  peer_bell_.ring();  // it may wait for space, or for its memory back
  return static_cast<ssize_t>(k);
}

ssize_t ShmStream::peek(void* data, size_t n) {
  if (closed_) {
    errno = EBADF;
    return -1;
  }
  if (rec_left_ > 0) {
    if (rec_ref_ || rec_left_ < n) {
      errno = EAGAIN;
      return -1;
    }
    copy_from_ring(in_, in_tail_, data, n);
    return static_cast<ssize_t>(n);
  }
  in_head_seen_ = in_tail_;  // force a fresh look
  uint64_t avail = readable();
  if (corrupt_) {
    errno = EPROTO;
    return -1;
  }
  if (avail == 0) {
    if (peer_gone_) return 0;
    errno = EAGAIN;
    return -1;
  }
  uint64_t tag = 0;
  copy_from_ring(in_, in_tail_, &tag, kTagBytes);
  // Only a frame header written in one piece can be peeked; anything else is
  // "not now", which is all check_idle needs.
  if ((tag & kByReference) || (tag & 0xffffffffu) < n || avail < kTagBytes + n) {
    errno = EAGAIN;
    return -1;
  }
  copy_from_ring(in_, in_tail_ + kTagBytes, data, n);
  return static_cast<ssize_t>(n);
}

uint64_t ShmStream::released() {
  uint64_t r = out_.ctl->released.load(std::memory_order_acquire);
  if (r > ref_posted_) {
    corrupt_ = true;  // the next write fails; never wait forever on a liar
    return ref_posted_;
  }
  return r;
}

void ShmStream::on_liveness_event() noexcept {
  if (!sock_.valid() || peer_gone_) return;
  // Nothing is ever sent on this socket: readable means EOF or an error.
  char c;
  ssize_t r;
  do {
    r = ::recv(sock_.get(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  } while (r < 0 && errno == EINTR);
  if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) peer_gone_ = true;
}

bool ShmStream::leave_note(const char* text, size_t n, uint32_t flags) noexcept {
  if (closed_) return false;
  AbortNote& note = out_.ctl->note;
  if (note.published.load(std::memory_order_relaxed) != 0) return true;  // said already
  n = std::min(n, kNoteBytes);
  std::memcpy(note.text, text, n);
  note.bytes = static_cast<uint32_t>(n);
  note.flags = flags;
  note.published.store(1, std::memory_order_release);
  peer_bell_.ring();
  return true;
}

bool ShmStream::peer_note(std::string* text, uint32_t* flags) const {
  if (closed_) return false;
  const AbortNote& note = in_.ctl->note;
  if (note.published.load(std::memory_order_acquire) != 1) return false;
  // The peer's process wrote these fields: check before use.
  uint32_t bytes = note.bytes, f = note.flags;
  if (!wire::abort_ok(bytes, f, kNoteBytes)) return false;
  text->assign(note.text, bytes);
  *flags = f;
  return true;
}

void ShmStream::close() noexcept {
  if (closed_) return;
  closed_ = true;
  if (sock_.valid()) ::shutdown(sock_.get(), SHUT_RDWR);
  sock_.reset();
  // Wake the peer if it sleeps on us; it then finds the socket closed.
  if (out_.segment) peer_bell_.ring();
  in_.segment.reset();
  out_.segment.reset();
}

}  // namespace pytfcomm::shm
