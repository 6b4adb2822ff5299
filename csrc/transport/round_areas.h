// Where negotiation records go when every rank shares memory with every
// other: one area per rank that it writes and every peer reads (shm/oneshot.h
// implements it; connect.cc hands it to the host transport). Without one,
// rounds travel as frames over the pairs.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pytfcomm::transport {

class RoundAreas {
 public:
  virtual ~RoundAreas() = default;
  // The smallest area (0 when there is none): what this rank can offer to rounds.
  virtual size_t capacity() const = 0;
  // Where this rank builds its record of `round`.
  virtual char* outbox(uint64_t round) const = 0;
  // Makes this rank's record of `round` (`bytes` long) visible and wakes the peers.
  virtual void publish(uint64_t round, size_t bytes) const = 0;
  // Whether rank `rank` published its record of `round` (polled while waiting).
  virtual bool published(int rank, uint64_t round) const = 0;
  // Rank `rank`'s record of `round` once published; its length as the peer
  // wrote it, never trusted beyond the area.
  virtual const char* record(int rank, uint64_t round, size_t* bytes) const = 0;
};

}  // namespace pytfcomm::transport
