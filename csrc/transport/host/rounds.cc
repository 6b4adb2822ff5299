// Negotiation rounds of the HostTransport (transport/transport.h): each
// rank's record of a round goes either into its one-shot area, where every
// local peer reads it in place (jobs whose ranks all share memory;
// shm/oneshot.h), or as a frame to every peer.
//
// Frames: publishing sends the record to every peer as a RND frame, from a
// buffer of the round's parity (free again two rounds later by the same
// argument). Each pair takes RND frames in whenever it reads, like status
// frames, into two slots by round parity (wire.h): a record never waits
// behind the collectives' frames, nor holds back status frames behind it.
// Arming round k drops the peers' records of round k - 1 and watches every
// peer whose record of round k has not come yet.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "common/error.h"
#include "transport/host/transport.h"

namespace pytfcomm::host {
namespace {

constexpr size_t kAlign = 64;

}  // namespace

void HostTransport::configure_rounds(size_t area_bytes, size_t min_area, size_t frame_bytes) {
  PTC_ENFORCE(area_bytes <= local_area_capacity(), "round area of ", area_bytes, " over ",
              local_area_capacity());
  if (area_bytes >= min_area && area_bytes > 0) {
    area_bytes_ = area_bytes;
    return;
  }
  frame_bytes_ = (frame_bytes + kAlign - 1) / kAlign * kAlign;
  auto alloc = [this] {
    void* p = std::aligned_alloc(kAlign, frame_bytes_);
    if (!p) PTC_THROW(kInternal, "out of memory for negotiation buffers");
    return Buffer(static_cast<char*>(p));
  };
  for (auto& p : pairs_) {
    if (p) p->set_inbox(frame_bytes_);  // at most what prepare_inbox() allowed
  }
  frame_out_[0] = alloc();
  frame_out_[1] = alloc();
}

void HostTransport::prepare_inbox(size_t bytes) {
  for (auto& p : pairs_) {
    if (p) p->set_inbox(bytes);
  }
}

size_t HostTransport::round_capacity() const { return area_bytes_ ? area_bytes_ : frame_bytes_; }

void HostTransport::round_arm(uint64_t round) {
  if (aborted_) PTC_THROW(kClosed, "the transport was shut down after an earlier error");
  round_ = round;
  published_ = false;
  own_bytes_ = 0;
  if (area_bytes_) return;
  for (int r = 0; r < size(); ++r) {
    if (r == rank_) continue;
    Pair& p = pair(r);
    add_active(r);  // while it is idle: watching makes it busy
    p.drop_record(round - 1);
    p.watch(round);
  }
}

char* HostTransport::round_outbox() {
  if (area_bytes_) return areas_.outbox(round_);
  return frame_out_[round_ & 1].get();
}

void HostTransport::round_publish(size_t bytes) {
  if (aborted_) PTC_THROW(kClosed, "the transport was shut down after an earlier error");
  PTC_ENFORCE(!published_ && bytes <= round_capacity(), "round record of ", bytes, " bytes");
  published_ = true;
  own_bytes_ = bytes;
  if (area_bytes_) {
    areas_.publish(round_, bytes);
    return;
  }
  for (int r = 0; r < size(); ++r) {
    if (r == rank_) continue;
    add_active(r);
    pair(r).post_record(round_outbox(), bytes, round_);
  }
  // Out at once: the round may already be complete here (every peer
  // published first), and then nothing would wait on these sends.
  progress_all();
}

bool HostTransport::has_record(int r) const {
  return area_bytes_ ? areas_.published(r, round_) : pairs_[r]->record_ready(round_);
}

bool HostTransport::round_started() {
  for (int r = 0; r < size(); ++r) {
    if (r == rank_) continue;
    if (has_record(r)) return true;
  }
  return false;
}

bool HostTransport::round_complete() {
  if (!published_) return false;
  for (int r = 0; r < size(); ++r) {
    if (r == rank_) continue;
    if (!has_record(r)) return false;
  }
  return true;
}

const char* HostTransport::round_record(int rank, size_t* bytes) {
  if (rank == rank_) {
    *bytes = own_bytes_;
    return round_outbox();
  }
  if (area_bytes_) return areas_.record(rank, round_, bytes);
  return pairs_[rank]->record(round_, bytes);
}

}  // namespace pytfcomm::host
