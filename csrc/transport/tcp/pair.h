// One established connection to one peer: FIFO queues of posted sends and
// receives, driven by non-blocking I/O. A pair never blocks; the transport
// decides when to wait.
#pragma once

#include <cstdint>
#include <deque>
#include <string>

#include "transport/tcp/socket.h"
#include "transport/wire.h"

namespace pytfcomm::tcp {

class Pair {
 public:
  Pair(int peer, Fd fd, std::string name, uint64_t max_message);

  int peer() const { return peer_; }
  int fd() const { return fd_.get(); }
  const std::string& name() const { return name_; }

  // Sequence numbers of the operations, in posting order per direction.
  uint64_t post_send(const void* data, size_t nbytes, const transport::MessageMeta& meta);
  uint64_t post_recv(void* data, size_t nbytes, const transport::MessageMeta& meta);
  bool send_done(uint64_t seq) const { return sends_done_ > seq; }
  bool recv_done(uint64_t seq) const { return recvs_done_ > seq; }
  bool idle() const { return sends_.empty() && recvs_.empty(); }
  bool wants_write() const { return !sends_.empty(); }

  // Move bytes until the kernel would block. Returns true if anything moved.
  // Throws kPeerLost / kMismatch with `context` in the message.
  bool progress(const std::string& context);

  // For a pair with nothing posted: notice an ABORT frame the peer sent
  // (throws kPeerLost with its reason). A clean EOF is only remembered: a
  // peer that finished its work may close before we finish ours.
  void check_idle(const std::string& context);

  // Best effort: send an ABORT frame if no frame is half-written, then close.
  void abort(const std::string& reason) noexcept;

 private:
  struct Op {
    char* data;
    size_t nbytes;
    size_t done;
    wire::FrameHeader header;
  };

  bool progress_send(const std::string& context);
  bool progress_recv(const std::string& context);
  [[noreturn]] void fail_lost(const std::string& context, const std::string& why);
  [[noreturn]] void read_abort_and_throw(const std::string& context);
  void check_header(const Op& op, const std::string& context);

  int peer_;
  Fd fd_;
  std::string name_;
  uint64_t max_message_;
  std::deque<Op> sends_;
  std::deque<Op> recvs_;
  uint64_t sends_posted_ = 0, sends_done_ = 0;
  uint64_t recvs_posted_ = 0, recvs_done_ = 0;
  size_t send_header_done_ = 0;  // bytes of the front send's header already written
  wire::FrameHeader in_header_{};
  size_t in_header_got_ = 0;
  bool eof_ = false;
};

}  // namespace pytfcomm::tcp
