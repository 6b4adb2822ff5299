// The transport of a job's ranks: what connect.h's factory returns and the
// engine holds. It is the three interfaces every transport implements
// (host/: TCP and shared memory; the in-memory one of tests/cpp), one per
// responsibility, each with its contract in its own header:
//
//   data_plane.h     posted sends and receives, and waits for them: the
//                    only part the algorithms see
//   round_channel.h  the engine's negotiation rounds and its doorbell
//   liveness.h       deadlines, heartbeats, status frames, abort and flush
//
// DataPlane comes first, so an algorithm's call through it reaches the
// implementation with no adjustment of `this`.
#pragma once

#include "transport/data_plane.h"
#include "transport/liveness.h"
#include "transport/round_channel.h"

namespace pytfcomm::transport {

class Transport : public DataPlane, public RoundChannel, public Liveness {
 public:
  ~Transport() override = default;
};

}  // namespace pytfcomm::transport
