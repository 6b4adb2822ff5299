// Liveness: how long the transport's waits may take and what it says when
// they do not end (deadline, context, peer names), heartbeats and the
// detection of a silent peer, the stall inspector's out-of-band status
// frames, and the two ways to stop: abort() with last words, or flush()
// before a clean close. docs/reliability.md has the behaviour; the data
// plane's and the round channel's waits apply it.
//
// Threading: one thread at a time, the thread that drives the engine (the
// same rule as the data plane's); keep_alive() comes from the engine's
// background thread while no other thread drives. A StatusObserver is
// called only from inside this transport's waits, on the waiting thread.
//
// Blocking: abort() and flush() are bounded in time (a peer that does not
// read gets nothing); everything else returns at once.
//
// Errors (pytfcomm::Error): keep_alive() throws what a wait throws about a
// peer: kPeerLost for one that went away or fell silent too long, a peer's
// abort as the class of its cause. abort(), flush() and send_status() never
// throw.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/error.h"
#include "transport/data_plane.h"

namespace pytfcomm::transport {

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

class Liveness {
 public:
  virtual ~Liveness() = default;

  // --- Deadlines and messages ---
  // Deadline for all waits until changed (TimePoint::max(): none).
  virtual void set_deadline(TimePoint deadline) = 0;
  // A short human description of what the caller is doing ("allreduce #12"),
  // used in error messages.
  virtual void set_context(const std::string& what) = 0;
  // "rank 3 (10.0.0.2:41000, host node7)", for messages.
  virtual std::string describe_peer(int peer) const = 0;

  // --- Heartbeats ---
  // Heartbeats every `interval_s`; a peer silent for `silence_s` is lost
  // (0: liveness off). Every rank of a job must use the same values.
  virtual void set_liveness(double interval_s, double silence_s) {}
  // While no collective waits (the engine's background thread): sends
  // heartbeats that are due and takes in what has arrived, without
  // blocking (waits do the same themselves).
  virtual void keep_alive() {}

  // --- Status frames (the stall inspector) ---
  // Optional; a transport without them keeps these defaults and the
  // inspector only sees its own rank.
  virtual void set_status_observer(StatusObserver* observer) {}
  // Best effort, never blocks: a status frame to `peer` between data frames.
  // False when it cannot go now (a frame half-written, no room).
  virtual bool send_status(int peer, const MessageMeta& meta, uint32_t flags) noexcept {
    return false;
  }
  // Peers with operations still pending (what a wait is waiting for).
  virtual std::vector<int> pending_peers() const { return {}; }

  // --- Stopping ---
  // Tell every peer we are giving up and why (`why`: the error that made us;
  // peers raise kTimeout for kTimeout, kMismatch for kMismatch, else
  // kPeerLost), then stop: later posts and rounds throw kClosed.
  virtual void abort(const std::string& reason, ErrorKind why) noexcept = 0;
  // Before a clean close: tries, until `until` at the latest, to hand what
  // is still queued to the peers (records a round did not wait for), then
  // waits for every byte written to be acknowledged.
  virtual void flush(TimePoint until) noexcept {}
};

}  // namespace pytfcomm::transport
