#include "transport/tcp/pair.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include "common/dtype.h"
#include "common/error.h"

namespace pytfcomm::tcp {
namespace {

std::string describe_meta(const transport::MessageMeta& m, uint64_t nbytes) {
  return str_cat("collective #", m.seq, " kind ", int(m.kind), " phase ", int(m.phase), " dtype ",
                 valid_dtype(m.dtype) ? dtype_name(static_cast<DType>(m.dtype)) : "?", " op ",
                 valid_op(m.op) ? op_name(static_cast<ReduceOp>(m.op)) : "?", " root ", m.root,
                 " count ", m.count, " (", nbytes, " bytes in this message)");
}

bool would_block(int err) { return err == EAGAIN || err == EWOULDBLOCK; }

}  // namespace

Pair::Pair(int peer, Fd fd, std::string name, uint64_t max_message)
    : peer_(peer), fd_(std::move(fd)), name_(std::move(name)), max_message_(max_message) {}

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
  PTC_THROW(kPeerLost, "lost ", name_, " during ", context, ": ", why,
            ". The process there probably exited or crashed; check its log. This communicator "
            "is now closed: restart the job or create a new one with pytfcomm.init()");
}

bool Pair::progress(const std::string& context) {
  bool moved = false;
  if (!sends_.empty()) moved |= progress_send(context);
  if (!recvs_.empty()) moved |= progress_recv(context);
  return moved;
}

bool Pair::progress_send(const std::string& context) {
  bool moved = false;
  while (!sends_.empty()) {
    Op& op = sends_.front();
    iovec iov[2];
    int n = 0;
    if (send_header_done_ < sizeof(wire::FrameHeader)) {
      iov[n++] = {reinterpret_cast<char*>(&op.header) + send_header_done_,
                  sizeof(wire::FrameHeader) - send_header_done_};
    }
    if (op.done < op.nbytes) iov[n++] = {op.data + op.done, op.nbytes - op.done};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n;
    ssize_t w = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (would_block(errno)) return moved;
      fail_lost(context, str_cat("send failed: ", std::strerror(errno)));
    }
    moved = true;
    size_t left = static_cast<size_t>(w);
    size_t h = std::min(left, sizeof(wire::FrameHeader) - send_header_done_);
    send_header_done_ += h;
    left -= h;
    op.done += left;
    if (send_header_done_ == sizeof(wire::FrameHeader) && op.done == op.nbytes) {
      sends_.pop_front();
      ++sends_done_;
      send_header_done_ = 0;
    }
  }
  return moved;
}

void Pair::check_header(const Op& op, const std::string& context) {
  const wire::FrameHeader& h = in_header_;
  if (h.magic == wire::kAbortMagic) read_abort_and_throw(context);
  if (h.magic != wire::kDataMagic) {
    fail_lost(context, "it sent bytes that are not a pytfcomm frame (corrupt stream)");
  }
  if (h.nbytes > max_message_) {
    PTC_THROW(kMismatch, name_, " announced a ", h.nbytes, "-byte message during ", context,
              ", over the limit PYTFCOMM_MAX_MESSAGE=", max_message_);
  }
  if (!(h.meta == op.header.meta) || h.nbytes != op.nbytes) {
    PTC_THROW(kMismatch, "ranks disagree during ", context, ": ", name_, " sent ",
              describe_meta(h.meta, h.nbytes), " but this rank expected ",
              describe_meta(op.header.meta, op.nbytes),
              ". Every rank must call the same collectives in the same order with the same "
              "dtype, element count, op and root");
  }
}

bool Pair::progress_recv(const std::string& context) {
  bool moved = false;
  while (!recvs_.empty()) {
    Op& op = recvs_.front();
    if (in_header_got_ < sizeof(wire::FrameHeader)) {
      ssize_t r = ::recv(fd_.get(), reinterpret_cast<char*>(&in_header_) + in_header_got_,
                         sizeof(wire::FrameHeader) - in_header_got_, 0);
      if (r == 0) {
        eof_ = true;
        fail_lost(context, "the connection was closed");
      }
      if (r < 0) {
        if (errno == EINTR) continue;
        if (would_block(errno)) return moved;
        fail_lost(context, str_cat("receive failed: ", std::strerror(errno)));
      }
      moved = true;
      in_header_got_ += static_cast<size_t>(r);
      if (in_header_got_ < sizeof(wire::FrameHeader)) continue;
      check_header(op, context);
    }
    if (op.done < op.nbytes) {
      ssize_t r = ::recv(fd_.get(), op.data + op.done, op.nbytes - op.done, 0);
      if (r == 0) {
        eof_ = true;
        fail_lost(context, "the connection was closed in the middle of a message");
      }
      if (r < 0) {
        if (errno == EINTR) continue;
        if (would_block(errno)) return moved;
        fail_lost(context, str_cat("receive failed: ", std::strerror(errno)));
      }
      moved = true;
      op.done += static_cast<size_t>(r);
    }
    if (op.done == op.nbytes) {
      recvs_.pop_front();
      ++recvs_done_;
      in_header_got_ = 0;
    }
  }
  return moved;
}

void Pair::read_abort_and_throw(const std::string& context) {
  size_t n = std::min<uint64_t>(in_header_.nbytes, wire::kMaxAbortReason);
  std::string reason(n, '\0');
  size_t got = 0;
  // The peer wrote the frame in one go before closing; a short bounded read.
  TimePoint deadline = deadline_after(1.0);
  while (got < n && Clock::now() < deadline) {
    ssize_t r = ::recv(fd_.get(), reason.data() + got, n - got, 0);
    if (r > 0) {
      got += static_cast<size_t>(r);
    } else if (r == 0 || (r < 0 && !would_block(errno) && errno != EINTR)) {
      break;
    }
  }
  reason.resize(got);
  for (char& c : reason) {
    if (static_cast<unsigned char>(c) < 0x20 && c != '\n') c = '?';
  }
  PTC_THROW(kPeerLost, name_, " aborted while this rank was in ", context, ": ",
            reason.empty() ? "(no reason given)" : reason);
}

void Pair::check_idle(const std::string& context) {
  if (eof_ || !recvs_.empty()) return;
  wire::FrameHeader h{};
  ssize_t r = ::recv(fd_.get(), &h, sizeof(h), MSG_PEEK);
  if (r == 0) {
    eof_ = true;
    return;
  }
  if (r == static_cast<ssize_t>(sizeof(h)) && h.magic == wire::kAbortMagic) {
    ::recv(fd_.get(), &in_header_, sizeof(h), 0);
    read_abort_and_throw(context);
  }
}

void Pair::abort(const std::string& reason) noexcept {
  if (!fd_.valid()) return;
  bool mid_frame = send_header_done_ > 0 || (!sends_.empty() && sends_.front().done > 0);
  if (!mid_frame && !eof_) {
    wire::FrameHeader h{};
    h.magic = wire::kAbortMagic;
    h.nbytes = std::min<size_t>(reason.size(), wire::kMaxAbortReason);
    iovec iov[2] = {{&h, sizeof(h)}, {const_cast<char*>(reason.data()), h.nbytes}};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = 2;
    (void)::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  ::shutdown(fd_.get(), SHUT_RDWR);
  fd_.reset();
  sends_.clear();
  recvs_.clear();
}

}  // namespace pytfcomm::tcp
