// How far the pipelined algorithms (ring.cc, halving_doubling.cc) run ahead
// of their receives: one fact for both.
#pragma once

#include <cstddef>

namespace pytfcomm::algorithms {

// Receives posted ahead of the one being reduced.
constexpr int kSlots = 4;
// Sends go out at most this many bytes ahead of this rank's receives. A
// step's own data is all ready at once: unpaced, a rank pushed a whole chunk
// at a peer that had only kSlots receives posted, filling its kernel receive
// queue, and loopback TCP then fell into loss recovery that stalled both
// ranks for seconds to minutes (docs/transports.md).
constexpr size_t kSendAheadBytes = 2 << 20;

}  // namespace pytfcomm::algorithms
