// The one interface every transport implements (host/: TCP and shared memory;
// the in-memory one of tests/cpp) and the only thing the algorithms see.
//
// Messages between two ranks are delivered in the order they were posted, per
// direction. A receive must be posted with the size and metadata the sender
// used; anything else is a mismatch error, never a silent reinterpretation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
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

// MessageMeta::kind of the frames that carry negotiation records (the
// collectives' kinds are 1..5 and 7.., algorithms/collective.h).
constexpr uint8_t kNegotiationKind = 6;

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
  // Those of them that did not answer the last status query: not reading
  // their connections, so not worth last words. A culprit that answered
  // (still in an older collective, or idle because the round reached it
  // only through a stopped rank) reads frames and must get the ABORT, or it
  // would take the closed connection for a lost peer.
  std::vector<int> silent;
  bool asked = false;  // every rank was asked: silent is known (else suspect all waited on)
  std::string text;    // a sentence naming them and their hosts ("": nothing known)
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

  // --- Negotiation rounds (engine/negotiator.h, docs/negotiation.md) ---
  // Every rank contributes one record per round and reads every other
  // rank's record of that round. Rounds are numbered from 1; round k is
  // armed once this rank is done with everything of round k-1 (its
  // records and the data of the collectives it decided).
  // The most bytes one record may hold.
  virtual size_t round_capacity() const = 0;
  // Arms round `round`: from now on peers' records of it are taken in.
  virtual void round_arm(uint64_t round) = 0;
  // Where to build this rank's record of the armed round (round_capacity()
  // bytes), then publish the first `bytes` of it; returns at once.
  virtual char* round_outbox() = 0;
  virtual void round_publish(size_t bytes) = 0;
  // Without blocking: whether some peer / every peer has published the
  // armed round (progress happens in waits).
  virtual bool round_started() = 0;
  virtual bool round_complete() = 0;
  // Rank `rank`'s record of the armed round once complete (this rank's own
  // too), readable until the next round_arm().
  virtual const char* round_record(int rank, size_t* bytes) = 0;

  // --- Waiting ---
  // Makes progress on everything and blocks between polls until pred()
  // holds. Throws what wait() throws (the deadline, a lost or silent peer),
  // and Error(kInterrupted) when the thread's interrupt check says so
  // (common/interrupt.h). `wake_by`: look at pred() again by then at the
  // latest.
  virtual void wait_for(const std::function<bool()>& pred, TimePoint wake_by) = 0;
  // Any thread: makes a wait_for() in progress look at its predicate soon.
  virtual void wake() noexcept {}
  // Liveness while no collective waits (the engine's background thread):
  // sends heartbeats that are due and takes in what has arrived, without
  // blocking. Throws kPeerLost for a peer that has been silent too long
  // (waits do the same themselves).
  virtual void keep_alive() {}
  // Before a clean close: tries, until `until` at the latest, to hand what
  // is still queued to the peers (records a round did not wait for), then
  // waits for every byte written to be acknowledged. Never throws.
  virtual void flush(TimePoint until) noexcept {}
  // Heartbeats every `interval_s`; a peer silent for `silence_s` is lost
  // (0: liveness off). Every rank of a job must use the same values.
  virtual void set_liveness(double interval_s, double silence_s) {}
};

}  // namespace pytfcomm::transport
