#include "negotiation_sim.h"

#include <algorithm>
#include <cstring>
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
  exchange();
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

void NegotiationSim::exchange() {
  // In step s (distance d = 2^s) rank r sends rank r - d a bundle of its own
  // record and the next min(d, size - d) - 1 ranks' records, which it took
  // from the bundles of earlier steps (rank r + j's from step floor(log2 j),
  // at index j - 2^step), and receives the like from rank r + d.
  size_t max_record = 0;
  for (Rank& k : ranks_) {
    max_record = std::max(max_record, k.bytes);
    k.in.clear();
    k.views.clear();
  }
  auto carried = [&](const Rank& k, int j, size_t* bytes) {
    int s = 0;
    while ((2 << s) <= j) ++s;
    const host::BundleView& v = k.views[static_cast<size_t>(s)];
    const size_t i = static_cast<size_t>(j - (1 << s));
    *bytes = v.bytes[i];
    return k.in[static_cast<size_t>(s)].data() + v.offset[i];
  };
  std::vector<char> out;
  std::vector<const char*> recs;
  std::vector<size_t> sizes;
  for (int d = 1; d < size_; d *= 2) {
    const size_t count = static_cast<size_t>(std::min(d, size_ - d));
    out.assign(host::bundle_capacity(count, max_record), 0);
    recs.resize(count);
    sizes.resize(count);
    for (int r = 0; r < size_; ++r) {
      Rank& k = ranks_[static_cast<size_t>(r)];
      recs[0] = k.buf.data();
      sizes[0] = k.bytes;
      for (size_t i = 1; i < count; ++i) recs[i] = carried(k, static_cast<int>(i), &sizes[i]);
      const size_t bytes = host::write_bundle(out.data(), static_cast<uint32_t>(r), recs.data(),
                                              sizes.data(), count);
      k.cost.frames += 1;
      k.cost.frame_bytes += bytes;
      Rank& to = ranks_[static_cast<size_t>((r - d + size_) % size_)];
      to.in.emplace_back(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(bytes));
      to.views.emplace_back();
      std::string bad =
          host::parse_bundle(to.in.back().data(), bytes, static_cast<uint32_t>(r),
                             static_cast<uint32_t>(count), max_record, &to.views.back());
      if (!bad.empty()) throw std::runtime_error(bad);
      to.cost.frames_in += 1;
      to.cost.frame_bytes_in += bytes;
    }
  }
  for (int r = 0; r < size_; ++r) {
    for (int j = 1; j < size_; ++j) {
      const Rank& q = ranks_[static_cast<size_t>((r + j) % size_)];
      size_t n = 0;
      const char* got = carried(ranks_[static_cast<size_t>(r)], j, &n);
      if (n != q.bytes || std::memcmp(got, q.buf.data(), n) != 0) {
        throw std::runtime_error("a bundle did not carry a record as written");
      }
    }
  }
}

void NegotiationSim::reset_cost() {
  for (Rank& k : ranks_) k.cost = Cost{};
}

}  // namespace pytfcomm::testing_util
