#include "engine/agreed_cache.h"

#include <charconv>
#include <cstring>

#include "common/error.h"

namespace pytfcomm {
namespace {

uint64_t mix(uint64_t h, uint64_t v) {
  // splitmix64's finalizer over the running value: order-sensitive.
  uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// " #<seq>" as the engine numbers labels ("allreduce #3 of MainThread",
// "allreduce 'grads' #3", "allreduce train_step/... #3").
size_t seq_mark(uint64_t seq, char* buf) {
  buf[0] = ' ';
  buf[1] = '#';
  return static_cast<size_t>(std::to_chars(buf + 2, buf + 24, seq).ptr - buf);
}

// `label` without its number: the last " #<seq>" not followed by a digit
// (renumber_label's rule) is cut out at `at` (npos: none).
struct Stem {
  const char* head;
  size_t head_bytes;
  const char* tail;
  size_t tail_bytes;
  size_t at;
  size_t bytes() const { return head_bytes + tail_bytes; }
};

Stem stem_of(const std::string& label, uint64_t seq) {
  char buf[24];
  const size_t n = seq_mark(seq, buf);
  size_t at = label.size() >= n ? label.size() - n + 1 : 0;
  while (at-- > 0) {
    if (std::memcmp(label.data() + at, buf, n) != 0) continue;
    const size_t end = at + n;
    if (end == label.size() || label[end] < '0' || label[end] > '9') {
      return {label.data(), at, label.data() + end, label.size() - end, at};
    }
  }
  return {label.data(), label.size(), nullptr, 0, std::string::npos};
}

uint64_t stem_hash(const Stem& s) {
  uint64_t fnv = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < s.head_bytes; ++i) {
    fnv = (fnv ^ static_cast<unsigned char>(s.head[i])) * 0x100000001b3ULL;
  }
  for (size_t i = 0; i < s.tail_bytes; ++i) {
    fnv = (fnv ^ static_cast<unsigned char>(s.tail[i])) * 0x100000001b3ULL;
  }
  return fnv ^ (s.at * 0x9e3779b97f4a7c15ULL);
}

}  // namespace

uint64_t AgreedCache::pattern_hash(uint64_t stream, const Descriptor& d, bool external,
                                   uint64_t label_hash) {
  uint64_t h = mix(0, stream);
  h = mix(h, d.count);
  h = mix(h, (uint64_t{static_cast<uint8_t>(d.kind)} << 0) |
                 (uint64_t{static_cast<uint8_t>(d.dtype)} << 8) |
                 (uint64_t{static_cast<uint8_t>(d.op)} << 16) | (uint64_t{d.algorithm} << 24) |
                 (uint64_t{external} << 32));
  h = mix(h, (uint64_t{static_cast<uint32_t>(d.root)} << 32) | d.shape_tag);
  return mix(h, label_hash);
}

int AgreedCache::find(uint64_t hash, uint64_t stream, const Descriptor& d, bool external,
                      const void* stem_ptr) const {
  const Stem& st = *static_cast<const Stem*>(stem_ptr);
  auto range = index_.equal_range(hash);
  for (auto it = range.first; it != range.second; ++it) {
    const Slot& s = slots_[static_cast<size_t>(it->second)];
    if (s.live && s.stream == stream && s.desc == d && s.external == external && s.at == st.at &&
        s.stem.size() == st.bytes() && std::memcmp(s.stem.data(), st.head, st.head_bytes) == 0 &&
        (st.tail_bytes == 0 ||
         std::memcmp(s.stem.data() + st.head_bytes, st.tail, st.tail_bytes) == 0)) {
      return it->second;
    }
  }
  return -1;
}

int AgreedCache::slot_of(const Request& r) const {
  // A longer label travels clipped in a full entry: the slot's would differ.
  if (index_.empty() || r.label.size() > kMaxLabelBytes) return -1;
  const Stem st = stem_of(r.label, r.key.seq);
  const bool external = r.external != nullptr;
  return find(pattern_hash(r.key.stream, r.desc, external, stem_hash(st)), r.key.stream, r.desc,
              external, &st);
}

std::string AgreedCache::expand(const Confirmation& c, Announcement* out) const {
  if (c.slot >= kSlots || !slots_[c.slot].live) {
    return str_cat("a confirmation of cache slot ", c.slot, ", which is empty");
  }
  const Slot& s = slots_[c.slot];
  out->key = {s.stream, c.seq};
  out->desc = s.desc;
  if (s.at == std::string::npos) {
    out->label = s.stem;
  } else {
    char buf[24];
    out->label.assign(s.stem, 0, s.at)
        .append(buf, seq_mark(c.seq, buf))
        .append(s.stem, s.at, std::string::npos);
  }
  out->eager = c.eager;
  out->external = s.external;
  out->data = c.data;
  out->data_bytes = 0;
  if (c.data) {
    out->data_bytes = static_cast<size_t>(s.desc.count * dtype_size(s.desc.dtype));
    if (s.external || out->data_bytes == 0 || out->data_bytes > c.data_room) {
      return str_cat("a confirmation of cache slot ", c.slot, " whose input is not its size");
    }
  }
  return "";
}

bool AgreedCache::only_announcement(const char* rec, size_t bytes, uint64_t round, int size,
                                    bool label, Announcement* out) const {
  RecordHeader h;
  if (!check_record_header(rec, bytes, round, &h).empty() || h.withdrawals != 0 ||
      h.entries + h.confirms != 1) {
    return false;
  }
  if (h.entries == 1) {
    RecordEntry e;
    std::memcpy(&e, rec + sizeof(RecordHeader), sizeof(e));
    if (check_record_entry(e, h, size) != nullptr) return false;
    out->key = {e.stream, e.seq};
    out->desc = entry_descriptor(e);
    out->eager = (e.flags & kEntryEager) != 0;
    out->external = (e.flags & kEntryExternal) != 0;
    out->data = e.eager_bytes ? rec + e.eager_offset : nullptr;
    out->data_bytes = static_cast<size_t>(e.eager_bytes);
    if (label) read_label(rec, e, &out->label);
    return true;
  }
  const size_t at = record_confirms_at(h);
  uint64_t digest;
  std::memcpy(&digest, rec + at - sizeof(digest), sizeof(digest));
  RecordConfirm rc;
  std::memcpy(&rc, rec + at, sizeof(rc));
  Confirmation c;
  if (digest != digest_ || check_record_confirm(rc, h, rec, &c) != nullptr) return false;
  if (c.slot >= kSlots || !slots_[c.slot].live) return false;
  if (label) return expand(c, out).empty();
  // Without the label: expand()'s checks, nothing allocated.
  const Slot& s = slots_[c.slot];
  out->key = {s.stream, c.seq};
  out->desc = s.desc;
  out->eager = c.eager;
  out->external = s.external;
  out->data = c.data;
  out->data_bytes = c.data ? static_cast<size_t>(s.desc.count * dtype_size(s.desc.dtype)) : 0;
  return !c.data || (!s.external && out->data_bytes > 0 && out->data_bytes <= c.data_room);
}

void AgreedCache::learn(const CollectiveKey& k, const Descriptor& d, bool external,
                        const std::string& label) {
  ++clock_;
  if (label.size() > kMaxLabelBytes) return;
  const Stem st = stem_of(label, k.seq);
  const uint64_t h = pattern_hash(k.stream, d, external, stem_hash(st));
  const int found = find(h, k.stream, d, external, &st);
  if (found >= 0) {
    slots_[static_cast<size_t>(found)].used = clock_;
    return;
  }
  // The first free slot, else the least recently decided (the lowest on a tie).
  size_t at = 0;
  for (size_t i = 0; i < kSlots; ++i) {
    if (!slots_[i].live) {
      at = i;
      break;
    }
    if (slots_[i].used < slots_[at].used) at = i;
  }
  Slot& s = slots_[at];
  if (s.live) {
    content_ ^= s.hash;
    auto range = index_.equal_range(s.index_hash);
    for (auto it = range.first; it != range.second; ++it) {
      if (it->second == static_cast<int>(at)) {
        index_.erase(it);
        break;
      }
    }
  }
  s.stream = k.stream;
  s.desc = d;
  s.external = external;
  s.at = st.at;
  s.stem.assign(st.head, st.head_bytes).append(st.tail ? st.tail : "", st.tail_bytes);
  s.index_hash = h;
  s.used = clock_;
  s.live = true;
  s.hash = mix(h, at);
  content_ ^= s.hash;
  index_.emplace(h, static_cast<int>(at));
  rehash_digest();
}

void AgreedCache::invalidate() {
  for (Slot& s : slots_) s.live = false;
  index_.clear();
  content_ = 0;
  ++epoch_;
  rehash_digest();
}

bool add_announcement(RecordWriter& w, const AgreedCache* cache, const Request& r, bool eager,
                      size_t data_bytes) {
  const int slot = cache ? cache->slot_of(r) : -1;
  auto fits = [&](size_t n) { return slot >= 0 ? w.fits_confirm(n) : w.fits(r, n); };
  if (!fits(data_bytes)) {
    if (data_bytes == 0 || !fits(0)) return false;
    eager = false;  // no room for its input: it runs after the round
    data_bytes = 0;
  }
  if (slot >= 0) {
    w.add_confirm(r, static_cast<uint16_t>(slot), cache->digest(), eager, r.in, data_bytes);
  } else {
    w.add(r, eager, r.in, data_bytes);
  }
  return true;
}

void AgreedCache::rehash_digest() { digest_ = mix(mix(epoch_, content_), index_.size()); }

}  // namespace pytfcomm
