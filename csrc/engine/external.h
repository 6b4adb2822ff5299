// A collective whose data another backend moves (the GPU backend's NCCL
// launches, gpu/gpu_collective.cc). The engine treats it like one of its
// own: it gets a key, is negotiated (its Descriptor compared across ranks,
// so a disagreement is a MismatchError on every rank), runs in the order
// the ranks decided, gets the engine's data deadline, the stall inspector
// and a timeline event; only, at its turn, run() moves the data instead of
// an algorithm over the transport.
#pragma once

#include <functional>

#include "algorithms/collective.h"
#include "common/clock.h"

namespace pytfcomm {

struct ExternalRun {
  TimePoint deadline;                    // starts when every rank is here, as for CPU data
  algorithms::Tracer* tracer = nullptr;  // the timeline's phases; null when it is off
  // Call every millisecond or so while waiting: it sends this rank's
  // heartbeats (peers would otherwise think it silent) and takes in what
  // peers sent, throwing kPeerLost (or their abort's kind) when one is
  // gone or gave up. Empty when there is nobody to watch.
  std::function<void()> keep_alive;
};

class ExternalCollective {
 public:
  virtual ~ExternalCollective() = default;
  // The timeline's "algorithm" of the event ("nccl", ...): a string literal.
  virtual const char* algorithm() const = 0;
  // Moves the data, on the thread that drives the engine. It must not call
  // the communicator (that thread is inside it) and must not wait past
  // `deadline`. An exception fails the communicator, as a transport error
  // does (peers are told).
  virtual void run(const ExternalRun& run) = 0;
};

}  // namespace pytfcomm
