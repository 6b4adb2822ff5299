// Data movement between the ranks of a job: posted sends and receives of
// payloads, and waits for them. The only part of the transport the
// algorithms see (algorithms/collective.h); transport.h combines it with the
// round channel and liveness.
//
// Order: messages between two ranks are delivered in the order they were
// posted, per direction. A receive must be posted with the size and metadata
// the sender used; anything else is a mismatch error, never a silent
// reinterpretation.
//
// Threading: not thread-safe. One thread at a time (the thread that drives
// the engine) posts, tests and waits; the implementation may also be in a
// round-channel or liveness call of that same thread, never concurrently.
//
// Blocking: posting never blocks (it queues; bytes move during test() and
// the waits). wait() and wait_all() block, bounded by the deadline
// (Liveness::set_deadline) and by peer liveness; they also send heartbeats
// and answer status queries while they wait.
//
// Errors (pytfcomm::Error): kTimeout past the deadline; kPeerLost when a
// peer went away or fell silent; a peer's abort as the class of its cause
// (kMismatch, kTimeout, else kPeerLost); kMismatch when a header disagrees
// with the posted receive or announces more than the message cap;
// kInterrupted when the thread's interrupt check says so
// (common/interrupt.h); kClosed once the transport was aborted. A bad peer
// index is a programming error (kInternal). After any of these the caller
// gives up on the collective and aborts (Liveness::abort).
#pragma once

#include <cstddef>
#include <cstdint>

namespace pytfcomm::transport {

// Describes the collective a message belongs to. It travels in every frame
// header and is compared on receipt, which is how ranks that disagree on a
// collective (order, dtype, count, op, root, algorithm) are caught.
struct MessageMeta {
  uint32_t seq = 0;   // collective sequence number on the communicator
  uint8_t kind = 0;   // CollectiveKind
  uint8_t dtype = 0;  // DType
  uint8_t op = 0;     // ReduceOp
  uint8_t phase = 0;  // algorithm and phase inside a composed algorithm
  int32_t root = 0;
  uint32_t shape_tag = 0;  // 32-bit digest of the caller's shape (0: not given)
  uint64_t count = 0;      // the collective's element count as the caller gave it
};
static_assert(sizeof(MessageMeta) == 24, "MessageMeta is part of the wire format");

inline bool operator==(const MessageMeta& a, const MessageMeta& b) {
  return a.seq == b.seq && a.kind == b.kind && a.dtype == b.dtype && a.op == b.op &&
         a.phase == b.phase && a.root == b.root && a.shape_tag == b.shape_tag && a.count == b.count;
}

// MessageMeta::kind of the frames that carry negotiation records (the round
// channel's; the collectives' kinds are 1..5 and 7.., common/collective_kind.h).
constexpr uint8_t kNegotiationKind = 6;

// Identifies a posted operation; valid until the transport is destroyed.
using Handle = uint64_t;

class DataPlane {
 public:
  virtual ~DataPlane() = default;

  // This rank and the number of ranks; peers are ranks in [0, size()) other
  // than rank().
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Queue a send or receive of `nbytes` with `peer`. The buffer stays the
  // caller's and must not be touched until the operation completes.
  virtual Handle post_send(int peer, const void* data, size_t nbytes, const MessageMeta& meta) = 0;
  virtual Handle post_recv(int peer, void* data, size_t nbytes, const MessageMeta& meta) = 0;

  // Make progress on every posted operation until `h` has completed.
  virtual void wait(Handle h) = 0;
  // Make progress without blocking; true when `h` has completed.
  virtual bool test(Handle h) = 0;
  // Wait until every posted operation has completed.
  virtual void wait_all() = 0;

  // The first message `peer` sent this collective ahead of its data phase
  // (RoundChannel::send_ahead, right behind the peer's record of the round
  // that decided it): waits for it like a receive, checks it against
  // `nbytes` and `meta` (kMismatch if they differ) and returns its bytes,
  // readable until the next round is armed. Only where the engine knows it
  // was sent (the round's records say so); a transport that never sends
  // ahead has none (kInternal).
  virtual const char* take_ahead(int peer, size_t nbytes, const MessageMeta& meta);
};

}  // namespace pytfcomm::transport
