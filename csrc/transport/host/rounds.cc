// Negotiation rounds of the HostTransport (transport/round_channel.h): each
// rank's record of a round goes either into its one-shot area, where every
// local peer reads it in place (jobs whose ranks all share memory;
// shm/oneshot.h), or travels in frames over the pairs.
//
// Frames: a log-depth exchange (Bruck's all-gather). In step s (distance
// d = 2^s, s < ceil(log2 size)) a rank sends the peer d below it one frame,
// a bundle (bundle.h) of the records of itself and the next min(d, size - d)
// - 1 ranks above it, and receives the like from the peer d above it; after
// the last step it holds every record. Equal records of consecutive ranks
// (the steady state) travel once per bundle, so a frame's size does not
// grow with the job's: what a rank reads of each rank points into the frame
// that carried it, several ranks at the same bytes. Each rank sends ceil(log2 size)
// frames per round instead of size - 1, which is what a round costs over
// TCP with more ranks than cores. Step s can go once the frame of step s - 1
// is here: round_complete() sends what it can, so a rank moves the exchange
// on whenever it looks at it. A rank that has not published when a bundle
// comes learns from it that the round started, as with direct frames.
//
// Each pair takes RND frames in whenever it reads, like status frames, into
// two slots by round parity (transport/wire.h): a record never waits behind the
// collectives' frames, nor holds back status frames behind it. A peer's
// bundle of round k + 2 cannot come before this rank armed k + 1 (that peer
// needs this rank's record of k + 1), which drops the slot of round k; the
// bundles this rank sends in round k are free again in round k + 2 by the
// same argument (the peer has read them before it published k + 1).
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "common/error.h"
#include "transport/host/bundle.h"
#include "transport/host/transport.h"

namespace pytfcomm::host {
namespace {

constexpr size_t kAlign = 64;

int step_count(int size) {
  int s = 0;
  while ((1 << s) < size) ++s;
  return s;
}

// The step whose bundle carries the record of the rank j above this one
// (0 < j < size): the s with 2^s <= j < 2^(s+1), at index j - 2^s.
int step_carrying(int j) {
  int s = 0;
  while ((2 << s) <= j) ++s;
  return s;
}

}  // namespace

int HostTransport::step_src(int s) const { return (rank_ + (1 << s)) % size(); }
int HostTransport::step_dst(int s) const { return (rank_ - (1 << s) % size() + size()) % size(); }
int HostTransport::above(int r) const { return (r - rank_ + size()) % size(); }
bool HostTransport::hears_from(int r) const {
  if (area_bytes_) return true;
  const int j = above(r);  // a step's source is 2^s above
  return j > 0 && (j & (j - 1)) == 0;
}
size_t HostTransport::step_records(int s) const {
  return static_cast<size_t>(std::min(1 << s, size() - (1 << s)));
}

void HostTransport::size_inboxes(size_t record_bytes) {
  // Only the peers this rank hears from in some step send it frames; a
  // frame from any other (a capacity of 0) is a broken stream.
  for (auto& p : pairs_) {
    if (p) p->set_inbox(0);
  }
  for (int s = 0; s < step_count(size()); ++s) {
    pairs_[step_src(s)]->set_inbox(bundle_capacity(step_records(s), record_bytes));
  }
}

void HostTransport::configure_rounds(size_t area_bytes, size_t min_area, size_t frame_bytes) {
  PTC_ENFORCE(area_bytes <= local_area_capacity(), "round area of ", area_bytes, " over ",
              local_area_capacity());
  if (area_bytes >= min_area && area_bytes > 0) {
    area_bytes_ = area_bytes;
    return;
  }
  frame_bytes_ = (frame_bytes + kAlign - 1) / kAlign * kAlign;
  steps_ = step_count(size());
  size_inboxes(frame_bytes_);  // at most what prepare_inbox() allowed
  views_.assign(static_cast<size_t>(steps_), {});
  parsed_.assign(static_cast<size_t>(steps_), false);
  for (auto& parity : bundles_out_) {
    parity.clear();
    for (int s = 0; s < steps_; ++s) {
      void* p = std::aligned_alloc(kAlign, bundle_capacity(step_records(s), frame_bytes_));
      if (!p) PTC_THROW(kInternal, "out of memory for negotiation buffers");
      parity.emplace_back(static_cast<char*>(p));
    }
  }
}

void HostTransport::prepare_inbox(size_t bytes) { size_inboxes(bytes); }

size_t HostTransport::round_capacity() const { return area_bytes_ ? area_bytes_ : frame_bytes_; }

void HostTransport::round_arm(uint64_t round) {
  if (aborted_) PTC_THROW(kClosed, "the transport was shut down after an earlier error");
  round_ = round;
  published_ = false;
  own_bytes_ = 0;
  sent_steps_ = 0;
  std::fill(parsed_.begin(), parsed_.end(), false);
  if (area_bytes_) return;
  if (ahead_bytes_) {
    for (auto& p : pairs_) {
      if (p) p->arm_ahead(round);  // earlier ones unused: their rounds decided otherwise
    }
  }
  for (int s = 0; s < steps_; ++s) {
    const int r = step_src(s);
    Pair& p = pair(r);
    add_active(r);  // while it is idle: watching makes it busy
    p.drop_record(round - 1);
    p.watch(round);
  }
}

char* HostTransport::round_outbox() {
  if (area_bytes_) return areas_->outbox(round_);
  return bundles_out_[round_ & 1][0].get() + bundle_table_bytes(1);
}

void HostTransport::round_publish(size_t bytes) {
  if (aborted_) PTC_THROW(kClosed, "the transport was shut down after an earlier error");
  PTC_ENFORCE(!published_ && bytes <= round_capacity(), "round record of ", bytes, " bytes");
  published_ = true;
  own_bytes_ = bytes;
  if (area_bytes_) {
    areas_->publish(round_, bytes);
    return;
  }
  send_steps();
}

bool HostTransport::bundle_here(int s) {
  if (parsed_[static_cast<size_t>(s)]) return true;
  const int src = step_src(s);
  Pair& p = *pairs_[src];
  if (!p.record_ready(round_)) return false;
  size_t bytes = 0;
  const char* b = p.record(round_, &bytes);
  std::string why =
      parse_bundle(b, bytes, static_cast<uint32_t>(src), static_cast<uint32_t>(step_records(s)),
                   frame_bytes_, &views_[static_cast<size_t>(s)]);
  if (!why.empty()) {
    PTC_THROW(kPeerLost, describe_peer(src), " sent negotiation records of round ", round_,
              " this rank cannot take (", why,
              "; corrupt stream or another pytfcomm version) during ", context_,
              ". This communicator is now closed");
  }
  parsed_[static_cast<size_t>(s)] = true;
  return true;
}

const char* HostTransport::bundled_record(int q, size_t* bytes) {
  const int j = above(q);
  const int s = step_carrying(j);
  const BundleView& v = views_[static_cast<size_t>(s)];
  const size_t i = static_cast<size_t>(j - (1 << s));
  size_t n = 0;
  const char* b = pairs_[step_src(s)]->record(round_, &n);
  *bytes = v.bytes[i];
  return b + v.offset[i];
}

void HostTransport::send_steps() {
  if (!published_ || area_bytes_) return;
  bool sent = false;
  while (sent_steps_ < steps_) {
    const int s = sent_steps_;
    if (s > 0 && !bundle_here(s - 1)) break;
    // Own record (built in place in step 0's bundle), then those of the
    // next step_records(s) - 1 ranks above, from the bundles of steps < s.
    const size_t count = step_records(s);
    std::vector<const char*>& recs = bundle_recs_;
    std::vector<size_t>& sizes = bundle_sizes_;
    recs.resize(count);
    sizes.resize(count);
    recs[0] = round_outbox();  // in step 0's bundle already: copied only after
    sizes[0] = own_bytes_;
    for (size_t i = 1; i < count; ++i) {
      recs[i] = bundled_record((rank_ + static_cast<int>(i)) % size(), &sizes[i]);
    }
    char* out = bundles_out_[round_ & 1][static_cast<size_t>(s)].get();
    const size_t bytes =
        write_bundle(out, static_cast<uint32_t>(rank_), recs.data(), sizes.data(), count);
    const int dst = step_dst(s);
    add_active(dst);
    pair(dst).post_record(out, bytes, round_);
    ++sent_steps_;
    sent = true;
  }
  // Out at once: the round may already be complete here, and then nothing
  // would wait on these sends.
  if (sent) progress_all();
}

bool HostTransport::has_record(int r) const {
  if (area_bytes_) return areas_->published(r, round_);
  return pairs_[step_src(step_carrying(above(r)))]->record_ready(round_);
}

bool HostTransport::round_started() {
  if (area_bytes_) {
    for (int r = 0; r < size(); ++r) {
      if (r != rank_ && has_record(r)) return true;
    }
    return false;
  }
  for (int s = 0; s < steps_; ++s) {
    if (pairs_[step_src(s)]->record_ready(round_)) return true;
  }
  return false;
}

bool HostTransport::round_complete() {
  if (!published_) return false;
  if (area_bytes_) {
    for (int r = 0; r < size(); ++r) {
      if (r != rank_ && !has_record(r)) return false;
    }
    return true;
  }
  send_steps();
  if (sent_steps_ < steps_) return false;
  return bundle_here(steps_ - 1);
}

const char* HostTransport::round_record(int rank, size_t* bytes) {
  if (rank == rank_) {
    *bytes = own_bytes_;
    return round_outbox();
  }
  if (area_bytes_) return areas_->record(rank, round_, bytes);
  PTC_ENFORCE(sent_steps_ == steps_ && parsed_[static_cast<size_t>(steps_ - 1)], "round ", round_,
              " is not complete");
  return bundled_record(rank, bytes);
}

}  // namespace pytfcomm::host
