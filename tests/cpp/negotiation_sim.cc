#include "negotiation_sim.h"

#include <algorithm>
#include <stdexcept>

#include "engine/agreed_cache.h"
#include "transport/host/bundle.h"

namespace pytfcomm::testing_util {

NegotiationSim::NegotiationSim(int size, bool by_slot)
    : size_(size), by_slot_(by_slot), ranks_(static_cast<size_t>(size)) {
  for (int r = 0; r < size; ++r) {
    Rank& k = ranks_[static_cast<size_t>(r)];
    k.negotiator = std::make_unique<Negotiator>(r, size);
    k.buf.resize(64 << 10);
  }
  decided_.resize(static_cast<size_t>(size));
  parsed_.resize(static_cast<size_t>(size));
}

uint64_t& NegotiationSim::next_seq(Rank& r, uint64_t stream) {
  auto it = std::find(streams_.begin(), streams_.end(), stream);
  size_t i = static_cast<size_t>(it - streams_.begin());
  if (it == streams_.end()) streams_.push_back(stream);
  for (Rank& k : ranks_) k.next_seq.resize(streams_.size(), 0);
  return r.next_seq[i];
}

Request* NegotiationSim::call(int rank, uint64_t stream, const Descriptor& d,
                              const std::string& name) {
  Rank& k = ranks_[static_cast<size_t>(rank)];
  requests_.push_back(std::make_unique<Request>());
  Request* r = requests_.back().get();
  r->desc = d;
  r->key = {stream, next_seq(k, stream)++};
  r->label = name + " #" + std::to_string(r->key.seq);
  k.fresh.push_back(r);
  return r;
}

void NegotiationSim::round() {
  for (Rank& k : ranks_) {
    RecordWriter w(k.buf.data(), k.buf.size(), round_);
    const AgreedCache* cache = by_slot_ ? &k.negotiator->cache() : nullptr;
    size_t taken = 0;
    for (; taken < k.fresh.size(); ++taken) {
      if (!add_announcement(w, cache, *k.fresh[taken], false, 0)) break;
      k.negotiator->announce(k.fresh[taken]);
    }
    k.fresh.erase(k.fresh.begin(), k.fresh.begin() + static_cast<std::ptrdiff_t>(taken));
    k.bytes = w.finish();
    k.cost.records += 1;
    k.cost.record_bytes += k.bytes;
  }
  // Frames: in step s a rank sends its record and the next min(2^s, size - 2^s) - 1.
  for (int r = 0; r < size_; ++r) {
    Cost& c = ranks_[static_cast<size_t>(r)].cost;
    for (int d = 1; d < size_; d *= 2) {
      const int count = std::min(d, size_ - d);
      size_t bytes = host::bundle_table_bytes(static_cast<size_t>(count));
      for (int i = 0; i < count; ++i) {
        bytes += host::bundle_align(ranks_[static_cast<size_t>((r + i) % size_)].bytes);
      }
      c.frames += 1;
      c.frame_bytes += bytes;
    }
  }
  for (int r = 0; r < size_; ++r) {
    const Rank& k = ranks_[static_cast<size_t>(r)];
    std::string bad =
        parse_record(k.buf.data(), k.bytes, round_, size_, &parsed_[static_cast<size_t>(r)]);
    if (!bad.empty()) throw std::runtime_error(bad);
  }
  for (int r = 0; r < size_; ++r) {
    Rank& k = ranks_[static_cast<size_t>(r)];
    k.negotiator->absorb(round_, parsed_);
    decided_[static_cast<size_t>(r)] = k.negotiator->decide();
    for (const Negotiator::Resync& rs : k.negotiator->resyncs()) {
      uint64_t next = rs.next;  // calls not announced yet follow, in order (resync_stream)
      for (Request* q : k.fresh) {
        if (q->key.stream != rs.stream) continue;
        q->key.seq = next++;
        q->label = q->label.substr(0, q->label.rfind(" #")) + " #" + std::to_string(q->key.seq);
      }
      next_seq(k, rs.stream) = next;
    }
  }
  ++round_;
}

void NegotiationSim::reset_cost() {
  for (Rank& k : ranks_) k.cost = Cost{};
}

}  // namespace pytfcomm::testing_util
