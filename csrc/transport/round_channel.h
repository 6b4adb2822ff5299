// The round channel: what the engine's negotiation rounds use
// (docs/negotiation.md). Every rank contributes one record per round and reads
// every other rank's record of that round; between rounds the engine sleeps in
// wait_for() until a round starts, its own requests come, or another thread
// rings wake().
//
// Rounds are numbered from 1; round k is armed once this rank is done with
// everything of round k-1 (its records and the data of the collectives it
// decided). Records need no posted receive: a peer's record is taken in
// whenever the transport reads, never behind a collective's data.
//
// Threading: wake() may be called from any thread, at any time while the
// transport exists. Everything else from one thread at a time, the thread that
// drives the engine (the same rule as the data plane's).
//
// Blocking: only wait_for() blocks; every other call returns at once (progress
// on rounds happens in waits, of this channel or the data plane).
//
// Errors (pytfcomm::Error): wait_for() throws what a data-plane wait throws
// (the deadline of Liveness::set_deadline, a lost or silent peer, a peer's
// abort, kInterrupted), and kPeerLost for a peer gone while its record is
// still needed; round_started() and round_complete() throw kPeerLost for a
// peer whose records this rank cannot take (a corrupt stream); round_arm(),
// round_publish() and wait_for() throw kClosed once the transport was
// aborted; a record over round_capacity() is a programming error (kInternal).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "common/clock.h"
#include "transport/data_plane.h"

namespace pytfcomm::transport {

class RoundChannel {
 public:
  virtual ~RoundChannel() = default;

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

  // Makes progress on everything (rounds, posted data, heartbeats) and
  // blocks between polls until pred() holds or `wake_by` passes (then it
  // returns; look at pred() again).
  virtual void wait_for(const std::function<bool()>& pred, TimePoint wake_by) = 0;
  // The first message of a collective's data sent right behind this rank's
  // record of the armed round (docs/negotiation.md), so that it travels
  // while the round completes. ahead_room(): whether `nbytes` to `peer` can
  // go now (records travel as frames, within the agreed limit, the buffer of
  // two rounds ago sent). send_ahead(), once published: copies `data` and
  // queues it; the peer takes it with DataPlane::take_ahead() or drops it.
  virtual bool ahead_room(int peer, size_t nbytes) const {
    (void)peer;
    (void)nbytes;
    return false;
  }
  virtual void send_ahead(int peer, const void* data, size_t nbytes, const MessageMeta& meta);
  // The doorbell: makes a wait_for() in progress look at its predicate
  // soon; one rung just before a wait_for() starts is not lost either.
  // Never throws, never blocks.
  virtual void wake() noexcept {}
};

}  // namespace pytfcomm::transport
