// The one interface every transport implements (TCP now; shared memory and
// NCCL later) and the only thing the algorithms see.
//
// Messages between two ranks are delivered in the order they were posted, per
// direction. A receive must be posted with the size and metadata the sender
// used; anything else is a mismatch error, never a silent reinterpretation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/error.h"

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

// Identifies a posted operation; valid until the transport is destroyed.
using Handle = uint64_t;

// Flags of a status frame (the stall inspector's out-of-band message).
enum StatusFlags : uint32_t {
  kStatusQuery = 1,         // the sender asks for this rank's status back
  kStatusInCollective = 2,  // the sender is inside `meta`'s collective (else: it last ran it)
  kStatusAllFlags = 3,
};

// What a status observer learned about a wait that reached its deadline.
struct StallVerdict {
  std::vector<int> culprits;  // ranks holding the collective back (hung, late, behind)
  std::string text;           // a sentence naming them and their hosts ("": nothing known)
  // Later than the deadline: this rank waits only on ranks that are
  // themselves waiting, so it waits this long more and lets a rank that
  // waits on a culprit directly time out first (and tell it why).
  TimePoint wait_until{};
};

// Told about the transport's waits; all calls come from the waiting thread.
class StatusObserver {
 public:
  virtual ~StatusObserver() = default;
  // The transport is about to block (it polled in vain). Returns when it
  // wants to be called again at the latest (TimePoint::max(): no need).
  virtual TimePoint on_block(TimePoint now) noexcept = 0;
  // A peer's status frame arrived (between data frames, never inside one).
  virtual void on_status(int peer, const MessageMeta& meta, uint32_t flags) noexcept = 0;
  // The wait passed its deadline; the transport times out with this in its
  // message unless the verdict asks it to wait a little longer.
  virtual StallVerdict on_deadline(TimePoint now) noexcept { return {}; }
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Queue a send or receive of `nbytes` with `peer`. The buffer stays the
  // caller's and must not be touched until the operation completes.
  virtual Handle post_send(int peer, const void* data, size_t nbytes, const MessageMeta& meta) = 0;
  virtual Handle post_recv(int peer, void* data, size_t nbytes, const MessageMeta& meta) = 0;

  // Make progress on every posted operation until `h` has completed. Throws
  // Error(kTimeout) past the deadline, kPeerLost when a peer goes away or
  // aborts, kMismatch when a header disagrees with the posted receive.
  virtual void wait(Handle h) = 0;
  // Make progress without blocking; true when `h` has completed.
  virtual bool test(Handle h) = 0;
  // Wait until every posted operation has completed.
  virtual void wait_all() = 0;

  // Deadline for all waits until changed (TimePoint::max(): none).
  virtual void set_deadline(TimePoint deadline) = 0;
  // A short human description of what the caller is doing ("allreduce #12"),
  // used in error messages.
  virtual void set_context(const std::string& what) = 0;

  // Tell every peer we are giving up and why (`why`: the error that made us;
  // peers raise kTimeout for kTimeout, else kPeerLost), then stop. Never
  // throws; bounded in time (a peer that does not read gets nothing).
  virtual void abort(const std::string& reason, ErrorKind why) noexcept = 0;

  // "rank 3 (10.0.0.2:41000, host node7)", for messages.
  virtual std::string describe_peer(int peer) const = 0;

  // Optional out-of-band status (the stall inspector); a transport without
  // it keeps these defaults and the inspector only sees its own rank.
  virtual void set_status_observer(StatusObserver* observer) {}
  // Best effort, never blocks: a status frame to `peer` between data frames.
  // False when it cannot go now (a frame half-written, no room).
  virtual bool send_status(int peer, const MessageMeta& meta, uint32_t flags) noexcept {
    return false;
  }
  // Peers with operations still pending (what a wait is waiting for).
  virtual std::vector<int> pending_peers() const { return {}; }

  // One-shot exchange for small collectives among ranks that all share
  // memory: each rank publishes its input where every other rank reads it
  // in place, so a whole all-reduce is one write, one wait and one local
  // reduce. Largest exchange in bytes; 0 where it is not available.
  virtual size_t oneshot_capacity() const { return 0; }
  // Publishes `nbytes` (<= oneshot_capacity()) of `data` under `meta`, waits
  // until every rank published this exchange, and returns each rank's bytes
  // (index = rank; this rank's own copy too), readable until this rank's
  // next exchange. Every rank must call it for the same collectives in the
  // same order. Throws kMismatch when a rank published other metadata or
  // size, or sent a frame meanwhile (it runs another collective), and the
  // errors of wait() otherwise.
  virtual std::vector<const void*> oneshot_exchange(const void* data, size_t nbytes,
                                                    const MessageMeta& meta) {
    PTC_THROW(kInternal, "this transport has no one-shot exchange");
  }
};

}  // namespace pytfcomm::transport
