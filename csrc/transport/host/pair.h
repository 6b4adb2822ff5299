// One established connection to one peer: FIFO queues of posted sends and
// receives, driven by non-blocking I/O on a ByteStream (a TCP socket or a
// shared-memory ring; the framing, checks and aborts are the same). A pair
// never blocks; the transport decides when to wait.
#pragma once

#include <sys/types.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <memory>
#include <string>

#include "common/clock.h"
#include "common/error.h"
#include "transport/liveness.h"
#include "transport/stream.h"
#include "transport/wire.h"

namespace pytfcomm::host {

// What a peer's last words (its abort note or ABORT frame) raise: an Error
// of the kind the peer gave. A peer leaves them after everything it sent
// before, but shared memory shows a note at once, beside data not read yet,
// and one read of a socket can take a record and the ABORT frame behind it.
// So the transport's waits tell this class apart: a wait that what had
// arrived already satisfies still completes (HostTransport::wait_until),
// and the pair keeps the words for the next wait that needs that peer.
class PeerLastWords : public Error {
 public:
  using Error::Error;
};

class Pair {
 public:
  Pair(int peer, std::unique_ptr<transport::ByteStream> stream, std::string name,
       uint64_t max_message);

  // The socket epoll watches for this pair (data, or liveness only).
  int fd() const { return stream_->liveness_fd(); }
  // Shared memory: progress must be polled, readiness comes by the doorbell.
  bool polled() const { return features_.polled != nullptr; }
  void on_liveness_event() noexcept {
    if (features_.polled) features_.polled->on_liveness_event();
  }

  // Sequence numbers of the operations, in posting order per direction.
  uint64_t post_send(const void* data, size_t nbytes, const transport::MessageMeta& meta);
  uint64_t post_recv(void* data, size_t nbytes, const transport::MessageMeta& meta);
  bool send_done(uint64_t seq) const { return sends_done_ > seq; }
  bool recv_done(uint64_t seq) const { return recvs_done_ > seq; }
  bool idle() const {
    return sends_.empty() && recvs_.empty() && unreleased_.empty() && !watching();
  }
  bool wants_write() const { return !sends_.empty(); }
  // A clean close, after every queued frame is written: no more writes (the
  // peer reads EOF after ours), and what the peer still sends is read and
  // dropped. True once nothing is left to wait for: the peer's kernel has
  // acknowledged every byte written, or the peer closed or is gone. (A
  // socket closed while the peer's data still arrives is reset, and a reset
  // drops whatever it had not delivered yet: the tail of a broadcast the
  // peer is still receiving.) Adds the bytes not acknowledged yet to *unacked.
  bool drain_for_close(size_t* unacked) noexcept;

  // Move bytes until the kernel would block. Returns true if anything moved.
  // Throws kPeerLost / kMismatch with `context` in the message.
  bool progress(const std::string& context);
  // Nothing posted to receive into, yet this rank is about to sleep on this
  // busy pair (its sends wait): empty the kernel's receive queue into memory
  // anyway (tcp/read_ahead_stream.h), and take control frames found there. Only
  // before sleeping: while a rank makes progress, its receives soon ask for
  // those bytes, and reading them ahead would copy them twice.
  bool read_ahead(const std::string& context);

  // For a pair with no receive posted (sends may be): notice the peer's
  // last words, an abort note or ABORT frame, or those heard before
  // (throws PeerLastWords: kPeerLost, or kTimeout when it gave up at a
  // deadline, with its reason), and read status frames.
  // A clean EOF is only remembered: a peer that finished its work may close
  // before we finish ours.
  void check_idle(const std::string& context);
  // For an idle pair while this rank waits for the peer outside the frames
  // (a negotiation round in shared memory): check_idle(), then kPeerLost if
  // the peer is gone.
  void check_alive(const std::string& context);

  // Giving up: tell the peer why, then close (docs/reliability.md). Where the
  // stream has a note (shared memory) the reason goes there and the pair
  // closes at once. Otherwise (TCP) begin_abort() keeps only the frame being
  // written, queues an ABORT frame after it and returns true; flush_abort()
  // then moves bytes without blocking (true while some remain), discarding
  // what the peer sends so that it never blocks on us, until the peer's
  // kernel holds everything; close() ends it. Nothing is sent to a peer
  // known to be gone or hung (mark_gone()). abort() does it all for one
  // pair, bounded by `seconds`. `flags`: wire::AbortFlags.
  bool begin_abort(const std::string& reason, uint32_t flags) noexcept;
  bool flush_abort() noexcept;
  void close() noexcept;
  void abort(const std::string& reason, uint32_t flags = 0, double seconds = 1.0) noexcept;
  void mark_gone() { gone_ = true; }

  // Status frames (stall inspector): delivered to `observer` as they are
  // read; sent queued behind the posted sends, never blocking.
  void set_status_observer(transport::StatusObserver* observer) { observer_ = observer; }
  bool send_status(const transport::MessageMeta& meta, uint32_t flags) noexcept;
  // Liveness: a BEAT frame queued like a status frame; and when anything
  // last came from the peer (bytes of any frame, read or read ahead).
  bool send_beat() noexcept;
  TimePoint last_heard() const { return last_heard_; }

  // Negotiation records (rounds.cc): RND frames are taken in whenever this
  // stream is read, like status frames, into two slots of up to `capacity`
  // bytes by round parity (allocated when the first record comes). While
  // the record of `watch` (0: none) is awaited the pair counts as busy
  // (progress reads it; its loss is an error).
  void set_inbox(size_t capacity) { inbox_capacity_ = capacity; }
  void watch(uint64_t round) { watch_ = round; }
  bool record_ready(uint64_t round) const;
  // A data frame's header read ahead of any receive for it (the peer sent
  // before this rank got that far): its meta in *meta. Frames behind it,
  // a status answer among them, stay unread until a receive takes it.
  bool data_waiting(transport::MessageMeta* meta) const {
    if (!header_ready_ || !recvs_.empty()) return false;
    *meta = in_header_.meta;
    return true;
  }
  // Nothing posted that its reads belong to (records and control frames
  // only may come next).
  bool idle_for_records() const { return recvs_.empty() && !header_ready_ && !ahead_held_; }
  const char* record(uint64_t round, size_t* bytes) const;
  void drop_record(uint64_t round);
  void post_record(const void* data, size_t bytes, uint64_t round);

  // First steps sent ahead (AHED frames, rounds.cc): taken in like records,
  // into two slots by round parity, each of up to `capacity` bytes (0: this
  // peer may send none). While this rank awaits one the pair counts as busy.
  void set_ahead_capacity(size_t capacity) { ahead_capacity_ = capacity; }
  void post_ahead(const void* data, size_t bytes, const transport::MessageMeta& meta,
                  uint64_t round);
  bool ahead_ready(uint64_t round) const;
  // The frame of `round` once here: its payload, *bytes and *meta.
  const char* ahead(uint64_t round, size_t* bytes, transport::MessageMeta* meta) const;
  // This rank armed `round`: frees the slots of other rounds (one still
  // arriving is dropped once it is here), and frames of older rounds that
  // come later are dropped as they come (a pair this rank did not read in
  // their round).
  void arm_ahead(uint64_t round);
  void await_ahead(bool on) { awaiting_ahead_ = on; }
  // The sequence number post_ahead() gave its last send (sends_done(seq)).
  uint64_t last_send() const { return sends_posted_ - 1; }

 private:
  struct Op {
    char* data;
    size_t nbytes;
    size_t done;
    wire::FrameHeader header;
  };

  static bool would_block(int err) { return err == EAGAIN || err == EWOULDBLOCK; }
  bool progress_send(const std::string& context);
  // Complete written sends whose memory the stream no longer needs.
  bool complete_released(const std::string& context);
  bool progress_recv(const std::string& context);
  // Reads what has arrived, taking in control frames (STAT, BEAT, RND), up
  // to the header of a data frame (then header_ready_) or until it would
  // block. True if bytes moved. At the end of the stream: an error if a
  // receive or a record is awaited, else remembered (a peer that finished
  // may close first).
  // `idle`: this rank is about to wait (check_idle), so an AHED frame's
  // payload is read now whatever it is for.
  bool read_control(const std::string& context, bool idle = false);
  bool watching() const { return (watch_ != 0 && !record_ready(watch_)) || awaiting_ahead_; }
  // Takes an AHED frame's header in (read_control); throws if refused.
  bool start_ahead(const std::string& context);
  // A record's or AHED frame's payload has all come.
  void finish_payload();
  // Writes what it can of the front send: -1 (errno) or bytes written.
  ssize_t write_front();
  [[noreturn]] void fail_lost(const std::string& context, const std::string& why);
  // Before a peer is called lost: throws its reason if it left one.
  void throw_last_words(const std::string& context);
  [[noreturn]] void read_abort_and_throw(const std::string& context);
  [[noreturn]] void throw_aborted(const std::string& context, std::string reason, uint32_t flags);
  void check_header(const Op& op, const std::string& context);
  // In-band last words end the write side (once); bytes written that the
  // peer has not acknowledged (0 where the stream cannot tell).
  void shut_write() noexcept;
  size_t unsent() const noexcept;
  void deliver_status(const wire::FrameHeader& h) noexcept;
  void heard() { last_heard_ = Clock::now(); }

  // True once the stream knows the peer is gone (streams that learn it
  // beside the data; the others say so by EOF).
  bool peer_gone() const { return features_.polled && features_.polled->peer_gone(); }
  bool spoke() const { return !last_words_.empty(); }

  int peer_;
  std::unique_ptr<transport::ByteStream> stream_;
  transport::StreamFeatures features_;  // the stream's, asked once
  bool closed_ = false;
  std::string name_;
  uint64_t max_message_;
  std::deque<Op> sends_;
  std::deque<Op> recvs_;
  std::deque<uint64_t> unreleased_;  // written sends' release tickets, in order
  uint64_t sends_posted_ = 0, sends_done_ = 0;
  uint64_t recvs_posted_ = 0, recvs_done_ = 0;
  size_t send_header_done_ = 0;  // bytes of the front send's header already written
  wire::FrameHeader in_header_{};
  size_t in_header_got_ = 0;
  bool header_ready_ = false;    // in_header_ is a data frame's, for the front receive
  bool header_checked_ = false;  // ... and matched with it
  // Negotiation records: two slots by round parity.
  struct FreeDeleter {
    void operator()(char* p) const { std::free(p); }
  };
  struct Slot {
    std::unique_ptr<char, FreeDeleter> data;  // 64-byte aligned: records carry inputs
    uint64_t round = 0;                       // 0: empty
    size_t bytes = 0;
    bool full = false;
  };
  Slot inbox_[2];
  size_t inbox_capacity_ = 0;
  // First steps sent ahead: two slots by round parity, like the records'.
  struct AheadSlot {
    std::unique_ptr<char, FreeDeleter> data;  // 64-byte aligned, grown to the largest
    size_t room = 0;
    uint32_t round = 0;  // the round's low 32 bits
    bool used = false;   // holds (or is filling with) a frame
    bool full = false;
    bool drop = false;  // dropped while it still arrived: freed once full
    size_t bytes = 0;
    transport::MessageMeta meta;
  };
  AheadSlot ahead_[2];
  size_t ahead_capacity_ = 0;
  bool awaiting_ahead_ = false;
  uint32_t ahead_armed_ = 0;  // the armed round's low 32 bits
  // An AHED frame's header is in in_header_, its payload still in the stream:
  // read only when this rank takes it or drops it, so that copying it never
  // delays the records a round waits for (frames behind it wait).
  bool ahead_held_ = false;
  // Whether the held (or next) AHED frame of `round` is to be read now:
  // this rank takes it, drops it (its round is over), needs what comes behind
  // it (a receive is posted), or has nothing else to do.
  bool ahead_wanted(uint32_t round, bool idle) const {
    return idle || awaiting_ahead_ || !recvs_.empty() ||
           static_cast<int32_t>(round - ahead_armed_) < 0;
  }
  AheadSlot* ahead_filling_ = nullptr;  // set while an AHED payload is read
  Slot* filling_ = nullptr;             // the slot a record's payload is being read into
  size_t record_left_ = 0;
  uint64_t watch_ = 0;
  bool eof_ = false;
  bool gone_ = false;         // the peer is gone or hung: send it nothing more
  bool aborting_ = false;     // between begin_abort() and close()
  bool shut_ = false;         // write side shut after the ABORT frame
  std::string abort_reason_;  // the ABORT frame's payload while it is sent
  // The peer's last words once heard (an ABORT frame is read only once);
  // never empty then (throw_aborted() gives an empty reason a text).
  std::string last_words_;
  uint32_t last_flags_ = 0;
  transport::StatusObserver* observer_ = nullptr;
  TimePoint last_heard_ = Clock::now();
};

}  // namespace pytfcomm::host
