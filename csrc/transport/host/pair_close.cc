// A Pair's last words and its end (pair.h): reading the reason a peer gave
// up (a note beside the data, or an ABORT frame in band), telling a peer
// ours, and closing without losing what is still on its way.
#include <poll.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"
#include "transport/host/pair.h"
#include "transport/wire_check.h"

namespace pytfcomm::host {
void Pair::throw_last_words(const std::string& context) {
  if (spoke()) throw_aborted(context, last_words_, last_flags_);
  std::string note;
  uint32_t flags = 0;
  if (features_.notes && features_.notes->peer_note(&note, &flags)) {
    throw_aborted(context, std::move(note), flags);
  }
  if (closed_ || polled()) return;
  // In band (TCP): a peer that gave up wrote its ABORT frame after the frame
  // it had begun, and closed only once our kernel held it; frames no receive
  // here asked for yet may come first. Skip them (into a fixed buffer, their
  // lengths checked first): this rank is failing anyway.
  char sink[16 << 10];
  uint64_t skip = record_left_;  // a record being read, then frames
  record_left_ = 0;
  ahead_filling_ = nullptr;
  if (ahead_held_) {  // a first step sent ahead, its payload not read yet
    skip += in_header_.nbytes;
    ahead_held_ = false;
    in_header_got_ = 0;
  }
  if (header_ready_) {
    skip += header_checked_ && !recvs_.empty() ? recvs_.front().nbytes - recvs_.front().done
                                               : in_header_.nbytes;
    header_ready_ = header_checked_ = false;
    in_header_got_ = 0;
  }
  TimePoint deadline = deadline_after(0.5);
  while (Clock::now() < deadline) {
    while (skip > 0) {
      ssize_t r = stream_->read_some(sink, std::min<uint64_t>(skip, sizeof(sink)));
      if (r <= 0) return;  // nothing more has come (or ever will)
      skip -= static_cast<uint64_t>(r);
    }
    if (in_header_got_ == sizeof(wire::FrameHeader)) in_header_got_ = 0;
    while (in_header_got_ < sizeof(wire::FrameHeader)) {
      ssize_t r = stream_->read_some(reinterpret_cast<char*>(&in_header_) + in_header_got_,
                                     sizeof(wire::FrameHeader) - in_header_got_);
      if (r <= 0) return;
      in_header_got_ += static_cast<size_t>(r);
    }
    const wire::FrameHeader& h = in_header_;
    switch (wire::check_frame(h, h.meta, h.nbytes, max_message_)) {
      case wire::FrameVerdict::kAbort:
        read_abort_and_throw(context);
      case wire::FrameVerdict::kStatus:
      case wire::FrameVerdict::kBeat:
        break;
      case wire::FrameVerdict::kRound:
      case wire::FrameVerdict::kAhead:
      case wire::FrameVerdict::kOk:  // a data frame of acceptable length
        skip = h.nbytes;
        break;
      default:
        return;  // not a frame: nothing to learn from this stream
    }
  }
}

void Pair::throw_aborted(const std::string& context, std::string reason, uint32_t flags) {
  for (char& c : reason) {
    if (static_cast<unsigned char>(c) < 0x20 && c != '\n') c = '?';
  }
  if (reason.empty()) reason = "(no reason given)";
  gone_ = true;
  last_words_ = reason;
  last_flags_ = flags;
  // The class of the root cause, so that every rank raises the same one;
  // the message names this peer as the one that relayed it.
  uint32_t kind = (flags & wire::kAbortKindMask) >> wire::kAbortKindShift;
  if (kind == static_cast<uint32_t>(ErrorKind::kMismatch) + 1) {
    PTC_THROW_AS(PeerLastWords, kMismatch, name_, " gave up on a mismatch while this rank was in ",
                 context, ": ", reason);
  }
  if ((flags & wire::kAbortTimeout) || kind == static_cast<uint32_t>(ErrorKind::kTimeout) + 1) {
    PTC_THROW_AS(PeerLastWords, kTimeout, name_, " gave up at its deadline while this rank was in ",
                 context, ": ", reason);
  }
  PTC_THROW_AS(PeerLastWords, kPeerLost, name_, " aborted while this rank was in ", context, ": ",
               reason);
}

void Pair::read_abort_and_throw(const std::string& context) {
  size_t n = std::min<uint64_t>(in_header_.nbytes, wire::kMaxAbortReason);
  std::string reason(n, '\0');
  size_t got = 0;
  // The peer wrote the frame in one go before closing; a short bounded read.
  TimePoint deadline = deadline_after(1.0);
  while (got < n && Clock::now() < deadline) {
    ssize_t r = stream_->read_some(reason.data() + got, n - got);
    if (r > 0) {
      got += static_cast<size_t>(r);
    } else if (r == 0 || (r < 0 && !would_block(errno))) {
      break;
    }
  }
  reason.resize(got);
  throw_aborted(context, std::move(reason), in_header_.reserved & wire::kAbortAllFlags);
}

bool Pair::begin_abort(const std::string& reason, uint32_t flags) noexcept {
  if (closed_) return false;
  closed_ = true;
  recvs_.clear();
  unreleased_.clear();
  // A note costs nothing and blocks nothing: even a peer thought hung gets one.
  size_t n = std::min<size_t>(reason.size(), wire::kMaxAbortReason);
  if ((features_.notes && features_.notes->leave_note(reason.data(), n, flags)) || gone_ || eof_) {
    close();
    return false;
  }
  // The frame already begun must be finished (the peer cannot tell its bytes
  // from an ABORT header); later ones are dropped. Every buffer a send reads
  // lives until the collective returns, after this.
  bool begun = send_header_done_ > 0 || (!sends_.empty() && sends_.front().done > 0);
  while (sends_.size() > (begun ? 1u : 0u)) sends_.pop_back();
  try {
    abort_reason_.assign(reason, 0, n);
    Op op{abort_reason_.data(), n, 0, {}};
    op.header.magic = wire::kAbortMagic;
    op.header.reserved = flags & wire::kAbortAllFlags;
    op.header.nbytes = n;
    sends_.push_back(op);
  } catch (...) {  // out of memory: close without last words
    close();
    return false;
  }
  aborting_ = true;
  return true;
}

bool Pair::flush_abort() noexcept {
  if (!aborting_) return false;
  // Whatever the peer sends is of no use now; reading it keeps the peer's
  // writes (and so its wait loop, which reads our frames) going.
  char sink[16 << 10];
  for (int i = 0; i < 64 && !eof_; ++i) {
    ssize_t r = stream_->read_some(sink, sizeof(sink));
    if (r == 0) eof_ = true;
    if (r <= 0) break;
  }
  while (!sends_.empty()) {
    if (write_front() < 0) return would_block(errno);  // else the peer is gone
    const Op& op = sends_.front();
    if (send_header_done_ == sizeof(wire::FrameHeader) && op.done == op.nbytes) {
      sends_.pop_front();
      send_header_done_ = 0;
    }
  }
  shut_write();
  return unsent() > 0;
}

bool Pair::drain_for_close(size_t* unacked) noexcept {
  if (closed_ || gone_ || aborting_ || polled()) return true;  // shm sends end copied
  shut_write();
  char sink[16 << 10];
  for (int i = 0; i < 64 && !eof_; ++i) {
    ssize_t r = stream_->read_some(sink, sizeof(sink));
    if (r == 0) eof_ = true;
    if (r < 0 && !would_block(errno)) return true;  // reset or gone: nothing to save
    if (r <= 0) break;
  }
  if (eof_) return true;
  size_t n = unsent();
  *unacked += n;
  return n == 0;
}

void Pair::shut_write() noexcept {
  if (shut_) return;
  shut_ = true;
  if (features_.half_close) features_.half_close->shutdown_write();
}

size_t Pair::unsent() const noexcept {
  return features_.half_close ? features_.half_close->unsent() : 0;
}

void Pair::close() noexcept {
  closed_ = true;
  aborting_ = false;
  stream_->close();
  sends_.clear();
  recvs_.clear();
  unreleased_.clear();
}

void Pair::abort(const std::string& reason, uint32_t flags, double seconds) noexcept {
  if (begin_abort(reason, flags)) {
    TimePoint deadline = deadline_after(seconds);
    while (flush_abort() && Clock::now() < deadline) {
      pollfd p{fd(), static_cast<short>(POLLIN | (wants_write() ? POLLOUT : 0)), 0};
      ::poll(&p, 1, 2);
    }
  }
  close();
}

}  // namespace pytfcomm::host
