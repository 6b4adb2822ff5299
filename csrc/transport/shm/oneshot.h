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

#include "transport/round_areas.h"
#include "transport/shm/segment.h"

namespace pytfcomm::shm {

class OneShotAreas final : public transport::RoundAreas {
 public:
  OneShotAreas() = default;  // none: rounds go elsewhere
  // segments[r]: rank r's segment as mapped here (this rank's own at index
  // `rank`). Empty unless every rank's segment is there with an area.
  OneShotAreas(int rank, const std::vector<std::shared_ptr<Mapping>>& segments);

  bool empty() const { return areas_.empty(); }
  // transport::RoundAreas (0 when empty).
  size_t capacity() const override;
  char* outbox(uint64_t round) const override;
  // Then rings every peer's doorbell.
  void publish(uint64_t round, size_t bytes) const override;
  bool published(int rank, uint64_t round) const override {
    return areas_[static_cast<size_t>(rank)].ctl->published.load(std::memory_order_acquire) >=
           round;
  }
  const char* record(int rank, uint64_t round, size_t* bytes) const override;

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
