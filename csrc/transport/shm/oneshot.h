// The ranks' one-shot areas (layout.h) as mapped here: where negotiation
// records go when every rank shares memory with every other. Rank r's
// record of round k is in buffer k & 1 of r's area; r writes it, then
// `published` = k with a release store, then rings every peer's doorbell.
// Two buffers suffice: a rank arms round k + 1 only after it finished round
// k, so a buffer is rewritten (round k + 2) only after every peer published
// round k + 1, which each does only after it finished reading round k.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "transport/shm/segment.h"

namespace pytfcomm::shm {

class OneShotAreas {
 public:
  OneShotAreas() = default;  // none: rounds go elsewhere
  // segments[r]: rank r's segment as mapped here (this rank's own at index
  // `rank`). Empty unless every rank's segment is there with an area.
  OneShotAreas(int rank, const std::vector<std::shared_ptr<Mapping>>& segments);

  bool empty() const { return areas_.empty(); }
  // The smallest area (0 when empty): what this rank can offer to rounds.
  size_t capacity() const;
  // Where this rank builds its record of `round`.
  char* outbox(uint64_t round) const;
  void publish(uint64_t round, size_t bytes) const;
  // Polled while a round is awaited: inline.
  bool published(int rank, uint64_t round) const {
    return areas_[static_cast<size_t>(rank)].ctl->published.load(std::memory_order_acquire) >=
           round;
  }
  // Rank `rank`'s record of `round` once published; its length as the peer
  // wrote it, never trusted beyond the buffer.
  const char* record(int rank, uint64_t round, size_t* bytes) const;

 private:
  struct Area {
    std::shared_ptr<Mapping> segment;  // keeps the mapping alive
    OneShotCtl* ctl = nullptr;
    char* buffers = nullptr;  // two of `bytes` each
    size_t bytes = 0;
  };
  int rank_ = 0;
  std::vector<Area> areas_;
};

}  // namespace pytfcomm::shm
