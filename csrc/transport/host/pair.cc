#include "transport/host/pair.h"

#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include "common/dtype.h"
#include "common/error.h"
#include "transport/wire_check.h"

namespace pytfcomm::host {
Pair::Pair(int peer, std::unique_ptr<transport::ByteStream> stream, std::string name,
           uint64_t max_message)
    : peer_(peer),
      stream_(std::move(stream)),
      features_(stream_->features()),
      name_(std::move(name)),
      max_message_(max_message) {}

uint64_t Pair::post_send(const void* data, size_t nbytes, const transport::MessageMeta& meta) {
  Op op{static_cast<char*>(const_cast<void*>(data)), nbytes, 0, {}};
  op.header.magic = wire::kDataMagic;
  op.header.nbytes = nbytes;
  op.header.meta = meta;
  sends_.push_back(op);
  return sends_posted_++;
}

uint64_t Pair::post_recv(void* data, size_t nbytes, const transport::MessageMeta& meta) {
  Op op{static_cast<char*>(data), nbytes, 0, {}};
  op.header.magic = wire::kDataMagic;
  op.header.nbytes = nbytes;
  op.header.meta = meta;
  recvs_.push_back(op);
  return recvs_posted_++;
}

void Pair::fail_lost(const std::string& context, const std::string& why) {
  gone_ = true;
  throw_last_words(context);
  PTC_THROW(kPeerLost, "lost ", name_, " during ", context, ": ", why,
            ". The process there probably exited or crashed; check its log. This communicator "
            "is now closed: restart the job or create a new one with pytfcomm.init()");
}

bool Pair::progress(const std::string& context) {
  bool moved = false;
  if (!sends_.empty()) moved |= progress_send(context);
  if (!unreleased_.empty()) moved |= complete_released(context);
  if (!recvs_.empty()) {
    moved |= progress_recv(context);
  } else if (watching() && !header_ready_) {
    moved |= read_control(context);
  }
  return moved;
}

bool Pair::read_ahead(const std::string& context) {
  if (!recvs_.empty() || closed_ || !features_.read_ahead || !features_.read_ahead->read_ahead()) {
    return false;
  }
  heard();
  // Those bytes' readiness edge is spent (epoll reports a socket only while
  // it is still readable), so nothing would make handle_events look at
  // them: a status answer or ABORT frame among them must be taken now, or
  // it waits unseen until the deadline.
  check_idle(context);
  return true;
}

ssize_t Pair::write_front() {
  Op& op = sends_.front();
  iovec iov[2];
  int n = 0;
  if (send_header_done_ < sizeof(wire::FrameHeader)) {
    iov[n++] = {reinterpret_cast<char*>(&op.header) + send_header_done_,
                sizeof(wire::FrameHeader) - send_header_done_};
  }
  if (op.done < op.nbytes) iov[n++] = {op.data + op.done, op.nbytes - op.done};
  if (features_.releasing && send_header_done_ == 0) {  // a new frame starts
    const transport::MessageMeta& m = op.header.meta;
    features_.releasing->set_collective_bytes(m.count * dtype_size(static_cast<DType>(m.dtype)));
  }
  ssize_t w = stream_->writev_some(iov, n);
  if (w < 0) return w;
  size_t left = static_cast<size_t>(w);
  size_t h = std::min(left, sizeof(wire::FrameHeader) - send_header_done_);
  send_header_done_ += h;
  left -= h;
  op.done += left;
  return w;
}

bool Pair::progress_send(const std::string& context) {
  bool moved = false;
  while (!sends_.empty()) {
    if (write_front() < 0) {
      if (would_block(errno)) return moved;
      fail_lost(context, str_cat("send failed: ", std::strerror(errno)));
    }
    moved = true;
    const Op& op = sends_.front();
    if (send_header_done_ == sizeof(wire::FrameHeader) && op.done == op.nbytes) {
      sends_.pop_front();
      send_header_done_ = 0;
      transport::ReleasingStream* rel = features_.releasing;
      uint64_t ticket = rel ? rel->release_ticket() : 0;
      if (unreleased_.empty() && (!rel || ticket <= rel->released())) {
        ++sends_done_;
      } else {
        unreleased_.push_back(ticket);
      }
    }
  }
  return moved;
}

bool Pair::complete_released(const std::string& context) {
  // Only a releasing stream leaves sends unreleased.
  uint64_t released = features_.releasing->released();
  bool moved = false;
  while (!unreleased_.empty() && unreleased_.front() <= released) {
    unreleased_.pop_front();
    ++sends_done_;
    moved = true;
  }
  if (!unreleased_.empty() && peer_gone()) {
    eof_ = true;
    fail_lost(context, "it went away before it had read a message sent to it");
  }
  return moved;
}

void Pair::check_header(const Op& op, const std::string& context) {
  const wire::FrameHeader& h = in_header_;
  switch (wire::check_frame(h, op.header.meta, op.nbytes, max_message_)) {
    case wire::FrameVerdict::kOk:
      return;
    case wire::FrameVerdict::kAbort:
      read_abort_and_throw(context);
    case wire::FrameVerdict::kStatus:  // handled before (read_control)
    case wire::FrameVerdict::kBeat:
    case wire::FrameVerdict::kRound:
    case wire::FrameVerdict::kAhead:
    case wire::FrameVerdict::kNotAFrame:
      fail_lost(context, "it sent bytes that are not a pytfcomm frame (corrupt stream)");
    case wire::FrameVerdict::kTooLarge:
      PTC_THROW(kMismatch, name_, " announced a ", h.nbytes, "-byte message during ", context,
                ", over the limit PYTFCOMM_MAX_MESSAGE=", max_message_);
    case wire::FrameVerdict::kMismatch:
      break;
  }
  transport::MessageMeta same_but_shape = h.meta;
  same_but_shape.shape_tag = op.header.meta.shape_tag;
  bool only_shape = same_but_shape == op.header.meta && h.nbytes == op.nbytes;
  PTC_THROW(kMismatch, "ranks disagree", only_shape ? " on the array shape" : "", " during ",
            context, ": ", name_, " sent ", wire::describe_meta(h.meta, h.nbytes),
            " but this rank expected ", wire::describe_meta(op.header.meta, op.nbytes),
            ". Every rank must call the same collectives in the same order with the same "
            "dtype, shape, element count, op and root");
}

bool Pair::read_control(const std::string& context, bool idle) {
  bool moved = false;
  if (ahead_held_) {
    if (!ahead_wanted(in_header_.reserved, idle)) return false;
    ahead_held_ = false;
    start_ahead(context);
  }
  while (!header_ready_) {
    char* dst;
    size_t want;
    if (record_left_ > 0) {
      dst = ahead_filling_ ? ahead_filling_->data.get() + (ahead_filling_->bytes - record_left_)
                           : filling_->data.get() + (filling_->bytes - record_left_);
      want = record_left_;
    } else {
      dst = reinterpret_cast<char*>(&in_header_) + in_header_got_;
      want = sizeof(wire::FrameHeader) - in_header_got_;
    }
    ssize_t r = stream_->read_some(dst, want);
    if (r == 0 || (r < 0 && !would_block(errno))) {
      const bool ended = r == 0;
      if (ended) eof_ = true;
      // Mid-frame or with a receive posted, that is a loss; otherwise only
      // remembered (a peer that finished may close first; a round that
      // needs its record checks, HostTransport::block_once).
      if (!recvs_.empty() || record_left_ > 0 || in_header_got_ > 0) {
        fail_lost(context, ended ? "the connection was closed"
                                 : str_cat("receive failed: ", std::strerror(errno)));
      }
      return moved;  // nothing was expected: remembered (eof_)
    }
    if (r < 0) return moved;  // would block
    moved = true;
    heard();
    if (record_left_ > 0) {
      record_left_ -= static_cast<size_t>(r);
      if (record_left_ == 0) finish_payload();
      continue;
    }
    in_header_got_ += static_cast<size_t>(r);
    if (in_header_got_ < sizeof(wire::FrameHeader)) continue;
    in_header_got_ = 0;
    switch (wire::check_frame(in_header_, {}, 0, max_message_)) {
      case wire::FrameVerdict::kStatus:
        deliver_status(in_header_);
        continue;
      case wire::FrameVerdict::kBeat:
        continue;
      case wire::FrameVerdict::kAbort:
        read_abort_and_throw(context);
      case wire::FrameVerdict::kRound: {
        const uint64_t round = in_header_.meta.count;
        Slot& slot = inbox_[round & 1];
        if (inbox_capacity_ == 0 || in_header_.nbytes > inbox_capacity_ || slot.round == round ||
            (slot.full && slot.round != 0)) {
          fail_lost(context, str_cat("it sent a negotiation record of ", in_header_.nbytes,
                                     " bytes for round ", round,
                                     " this rank cannot take (corrupt stream or version)"));
        }
        if (!slot.data) {
          void* mem = std::aligned_alloc(64, (inbox_capacity_ + 63) / 64 * 64);
          if (!mem) PTC_THROW(kInternal, "out of memory for negotiation records");
          slot.data.reset(static_cast<char*>(mem));
        }
        slot.round = round;
        slot.bytes = static_cast<size_t>(in_header_.nbytes);
        slot.full = slot.bytes == 0;
        filling_ = &slot;
        ahead_filling_ = nullptr;
        record_left_ = slot.bytes;
        continue;
      }
      case wire::FrameVerdict::kAhead:
        if (!ahead_wanted(in_header_.reserved, idle)) {
          ahead_held_ = true;  // its payload waits in the stream
          return moved;
        }
        start_ahead(context);
        continue;
      default:  // a data frame (or garbage: its receive's check says so)
        in_header_got_ = sizeof(wire::FrameHeader);
        header_ready_ = true;
        break;
    }
  }
  return moved;
}

bool Pair::progress_recv(const std::string& context) {
  bool moved = false;
  while (!recvs_.empty()) {
    Op& op = recvs_.front();
    if (!header_ready_) {
      moved |= read_control(context);
      if (!header_ready_) return moved;
    }
    if (!header_checked_) {
      check_header(op, context);
      header_checked_ = true;
    }
    if (op.done < op.nbytes) {
      ssize_t r = stream_->read_some(op.data + op.done, op.nbytes - op.done);
      if (r == 0) {
        eof_ = true;
        fail_lost(context, "the connection was closed in the middle of a message");
      }
      if (r < 0) {
        if (would_block(errno)) return moved;
        fail_lost(context, str_cat("receive failed: ", std::strerror(errno)));
      }
      moved = true;
      heard();
      op.done += static_cast<size_t>(r);
    }
    if (op.done == op.nbytes) {
      recvs_.pop_front();
      ++recvs_done_;
      header_ready_ = false;
      header_checked_ = false;
      in_header_got_ = 0;
    }
  }
  return moved;
}

void Pair::check_idle(const std::string& context) {
  if (closed_) return;
  if (spoke()) throw_aborted(context, last_words_, last_flags_);
  std::string note;
  uint32_t flags = 0;
  if (features_.notes && features_.notes->peer_note(&note, &flags)) {
    throw_aborted(context, std::move(note), flags);
  }
  // Control frames that wait here are taken in; they are all we may read
  // without a posted receive (a data frame's header is kept for it).
  if (eof_ || !recvs_.empty() || header_ready_) return;
  read_control(context, true);
}

void Pair::check_alive(const std::string& context) {
  check_idle(context);
  if (eof_ || peer_gone()) fail_lost(context, "its connection closed");
}

void Pair::deliver_status(const wire::FrameHeader& h) noexcept {
  if (observer_) observer_->on_status(peer_, h.meta, h.reserved);
}

bool Pair::record_ready(uint64_t round) const {
  const Slot& s = inbox_[round & 1];
  return s.full && s.round == round;
}

const char* Pair::record(uint64_t round, size_t* bytes) const {
  const Slot& s = inbox_[round & 1];
  PTC_ENFORCE(s.full && s.round == round, "no record of round ", round, " from ", name_);
  *bytes = s.bytes;
  return s.data.get();
}

void Pair::drop_record(uint64_t round) {
  Slot& s = inbox_[round & 1];
  if (s.round == round && s.full) {
    s.round = 0;
    s.full = false;
  }
}

void Pair::post_record(const void* data, size_t bytes, uint64_t round) {
  Op op{static_cast<char*>(const_cast<void*>(data)), bytes, 0, {}};
  op.header.magic = wire::kRoundMagic;
  op.header.nbytes = bytes;
  op.header.meta.seq = static_cast<uint32_t>(round);
  op.header.meta.kind = transport::kNegotiationKind;
  op.header.meta.count = round;
  sends_.push_back(op);
  ++sends_posted_;
}

bool Pair::start_ahead(const std::string& context) {
  const uint32_t round = in_header_.reserved;
  AheadSlot& slot = ahead_[round & 1];
  const size_t bytes = static_cast<size_t>(in_header_.nbytes);
  // At most one per round, and a peer is at most one round ahead: the slot
  // of two rounds ago was freed when this rank armed the round after it, or
  // when that frame had all come (arm_ahead). A busy slot is a broken stream.
  if (bytes > ahead_capacity_ || slot.used) {
    fail_lost(context, str_cat("it sent a first step of ", bytes, " bytes ahead for round ", round,
                               " this rank cannot take (",
                               bytes > ahead_capacity_ ? "over the agreed limit"
                                                       : "one of that round is still held",
                               "; corrupt stream or version)"));
  }
  if (slot.room < bytes) {
    const size_t room = (bytes + 63) / 64 * 64;
    void* mem = std::aligned_alloc(64, room);
    if (!mem) PTC_THROW(kInternal, "out of memory for a first step sent ahead");
    slot.data.reset(static_cast<char*>(mem));
    slot.room = room;
  }
  slot.round = round;
  slot.used = true;
  slot.full = false;
  // Of a round this rank is past (wrapping like the rounds' low bits).
  slot.drop = static_cast<int32_t>(round - ahead_armed_) < 0;
  slot.bytes = bytes;
  slot.meta = in_header_.meta;
  ahead_filling_ = &slot;
  record_left_ = bytes;
  if (bytes == 0) finish_payload();
  return true;
}

void Pair::finish_payload() {
  if (!ahead_filling_) {
    filling_->full = true;
    return;
  }
  AheadSlot& slot = *ahead_filling_;
  ahead_filling_ = nullptr;
  slot.full = true;
  if (slot.drop) slot.used = slot.full = slot.drop = false;
}

void Pair::post_ahead(const void* data, size_t bytes, const transport::MessageMeta& meta,
                      uint64_t round) {
  Op op{static_cast<char*>(const_cast<void*>(data)), bytes, 0, {}};
  op.header.magic = wire::kAheadMagic;
  op.header.reserved = static_cast<uint32_t>(round);
  op.header.nbytes = bytes;
  op.header.meta = meta;
  sends_.push_back(op);
  ++sends_posted_;
}

bool Pair::ahead_ready(uint64_t round) const {
  const AheadSlot& s = ahead_[round & 1];
  return s.used && s.full && !s.drop && s.round == static_cast<uint32_t>(round);
}

const char* Pair::ahead(uint64_t round, size_t* bytes, transport::MessageMeta* meta) const {
  PTC_ENFORCE(ahead_ready(round), "no first step of round ", round, " from ", name_);
  const AheadSlot& s = ahead_[round & 1];
  *bytes = s.bytes;
  *meta = s.meta;
  return s.data.get();
}

void Pair::arm_ahead(uint64_t round) {
  ahead_armed_ = static_cast<uint32_t>(round);
  for (AheadSlot& s : ahead_) {
    if (!s.used || s.round == ahead_armed_) continue;
    if (s.full) {
      s.used = s.full = s.drop = false;
    } else {
      s.drop = true;
    }
  }
}

bool Pair::send_beat() noexcept {
  if (closed_ || eof_ || gone_) return false;
  Op op{nullptr, 0, 0, {}};
  op.header.magic = wire::kBeatMagic;
  sends_.push_back(op);
  ++sends_posted_;
  return true;
}

bool Pair::send_status(const transport::MessageMeta& meta, uint32_t flags) noexcept {
  if (closed_ || eof_ || gone_) return false;
  // Queued like a header-only send, so a partial write is finished by the
  // usual progress and frames never interleave. Its sequence number is
  // simply one nobody waits for.
  Op op{nullptr, 0, 0, {}};
  op.header.magic = wire::kStatusMagic;
  op.header.reserved = flags;
  op.header.meta = meta;
  sends_.push_back(op);
  ++sends_posted_;
  return true;
}

}  // namespace pytfcomm::host
