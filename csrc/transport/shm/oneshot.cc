#include "transport/shm/oneshot.h"

#include <algorithm>

#include "transport/shm/doorbell.h"

namespace pytfcomm::shm {

OneShotAreas::OneShotAreas(int rank, const std::vector<std::shared_ptr<Mapping>>& segments)
    : rank_(rank) {
  for (const auto& m : segments) {
    if (m == nullptr || m->header()->oneshot_bytes == 0) return;
  }
  for (const auto& m : segments) {
    const SegmentHeader* h = m->header();
    char* ctl = m->base() + oneshot_offset(h->num_rings, h->ring_bytes);
    areas_.push_back(
        {m, reinterpret_cast<OneShotCtl*>(ctl), ctl + kOneShotCtlBytes, h->oneshot_bytes});
  }
}

size_t OneShotAreas::capacity() const {
  size_t cap = areas_.empty() ? 0 : SIZE_MAX;
  for (const Area& a : areas_) cap = std::min(cap, a.bytes);
  return cap;
}

char* OneShotAreas::outbox(uint64_t round) const {
  const Area& mine = areas_[static_cast<size_t>(rank_)];
  return mine.buffers + (round & 1) * mine.bytes;
}

void OneShotAreas::publish(uint64_t round, size_t bytes) const {
  const Area& mine = areas_[static_cast<size_t>(rank_)];
  mine.ctl->slot[round & 1].nbytes = bytes;
  mine.ctl->published.store(round, std::memory_order_release);
  for (size_t r = 0; r < areas_.size(); ++r) {
    if (static_cast<int>(r) != rank_) Doorbell(areas_[r].segment->header()).ring();
  }
}

const char* OneShotAreas::record(int rank, uint64_t round, size_t* bytes) const {
  const Area& a = areas_[static_cast<size_t>(rank)];
  *bytes = std::min<uint64_t>(a.ctl->slot[round & 1].nbytes, a.bytes);
  return a.buffers + (round & 1) * a.bytes;
}

}  // namespace pytfcomm::shm
