#include "engine/round_record.h"

#include <algorithm>
#include <charconv>
#include <cstring>

#include "common/algorithm.h"
#include "common/error.h"

namespace pytfcomm {
namespace {

size_t align_up(size_t v) { return (v + kRecordAlign - 1) / kRecordAlign * kRecordAlign; }

// The cache digest before the confirmations, when there are any.
constexpr size_t kDigestBytes = sizeof(uint64_t);

size_t table_bytes(size_t entries, size_t withdrawals, size_t confirms) {
  return sizeof(RecordHeader) + entries * sizeof(RecordEntry) + withdrawals * sizeof(RecordKey) +
         (confirms ? kDigestBytes + confirms * sizeof(RecordConfirm) : 0);
}

size_t label_size(const std::string& label) { return std::min(label.size(), kMaxLabelBytes); }

// Appends `label` as a record carries it (label_size() bytes).
void append_label(std::string& out, const std::string& label) {
  if (label.size() <= kMaxLabelBytes) {
    out.append(label);
    return;
  }
  constexpr size_t kHead = kMaxLabelBytes / 2 - 2;  // a function's name starts it
  constexpr size_t kTail = kMaxLabelBytes - kHead - 3;
  out.append(label, 0, kHead).append("...").append(label, label.size() - kTail, kTail);
}

bool valid_kind(uint8_t k) {
  return valid_code<algorithms::CollectiveKind>(k) &&
         k != static_cast<uint8_t>(algorithms::CollectiveKind::kNegotiate);
}

}  // namespace

void RecordWriter::reset(char* buf, size_t capacity, uint64_t round) {
  buf_ = buf;
  capacity_ = capacity;
  round_ = round;
  entries_.clear();
  withdrawals_.clear();
  confirms_.clear();
  digest_ = 0;
  flags_ = 0;
  data_.clear();
  confirm_data_.clear();
  data_bytes_ = 0;
  labels_.clear();
}

bool RecordWriter::fits(const Request& r, size_t data_bytes) const {
  if (entries_.size() >= kMaxRecordEntries) return false;
  size_t data = data_bytes_ + (data_bytes ? align_up(data_bytes) : 0);
  size_t table = table_bytes(entries_.size() + 1, withdrawals_.size(), confirms_.size());
  return align_up(table + labels_.size() + label_size(r.label)) + data <= capacity_;
}

void RecordWriter::add(const Request& r, bool eager, const void* data, size_t data_bytes) {
  PTC_ENFORCE(fits(r, data_bytes), "record entry does not fit");
  RecordEntry e{};
  e.stream = r.key.stream;
  e.seq = r.key.seq;
  e.count = r.desc.count;
  e.eager_bytes = data_bytes;
  e.shape_tag = r.desc.shape_tag;
  e.root = r.desc.root;
  e.kind = static_cast<uint8_t>(r.desc.kind);
  e.dtype = static_cast<uint8_t>(r.desc.dtype);
  e.op = static_cast<uint8_t>(r.desc.op);
  e.algorithm = r.desc.algorithm;
  e.flags = (eager ? uint32_t{kEntryEager} : 0u) | (r.external ? uint32_t{kEntryExternal} : 0u);
  e.label_offset = static_cast<uint32_t>(labels_.size());  // in the labels, until finish()
  e.label_bytes = static_cast<uint16_t>(label_size(r.label));
  append_label(labels_, r.label);
  entries_.push_back(e);
  data_.push_back({data, data_bytes});
  if (data_bytes) data_bytes_ += align_up(data_bytes);
}

bool RecordWriter::add_withdrawal(const CollectiveKey& k) {
  if (withdrawals_.size() >= kMaxRecordEntries ||
      align_up(table_bytes(entries_.size(), withdrawals_.size() + 1, confirms_.size()) +
               labels_.size()) +
              data_bytes_ >
          capacity_) {
    return false;
  }
  withdrawals_.push_back({k.stream, k.seq});
  return true;
}

bool RecordWriter::fits_confirm(size_t data_bytes) const {
  if (confirms_.size() >= kMaxRecordEntries) return false;
  size_t data = data_bytes_ + (data_bytes ? align_up(data_bytes) : 0);
  size_t table = table_bytes(entries_.size(), withdrawals_.size(), confirms_.size() + 1);
  size_t end = align_up(table + labels_.size()) + data;
  return end <= capacity_ && end <= UINT32_MAX;  // eager_offset is 32 bits
}

void RecordWriter::add_confirm(const Request& r, uint16_t slot, uint64_t digest, bool eager,
                               const void* data, size_t data_bytes) {
  PTC_ENFORCE(fits_confirm(data_bytes), "record confirmation does not fit");
  PTC_ENFORCE(confirms_.empty() || digest == digest_, "two cache digests in one record");
  digest_ = digest;
  RecordConfirm c{};
  c.seq = r.key.seq;
  c.slot = slot;
  c.flags = eager ? uint16_t{kEntryEager} : uint16_t{0};
  confirms_.push_back(c);
  confirm_data_.push_back({data, data_bytes});
  if (data_bytes) data_bytes_ += align_up(data_bytes);
}

size_t RecordWriter::finish() {
  const size_t labels_at = table_bytes(entries_.size(), withdrawals_.size(), confirms_.size());
  size_t offset = align_up(labels_at + labels_.size());
  for (size_t i = 0; i < entries_.size(); ++i) {
    entries_[i].label_offset += static_cast<uint32_t>(labels_at);
    if (data_[i].bytes == 0) continue;
    entries_[i].eager_offset = offset;
    std::memcpy(buf_ + offset, data_[i].src, data_[i].bytes);
    offset += align_up(data_[i].bytes);
  }
  for (size_t i = 0; i < confirms_.size(); ++i) {
    if (confirm_data_[i].bytes == 0) continue;
    confirms_[i].eager_offset = static_cast<uint32_t>(offset);
    std::memcpy(buf_ + offset, confirm_data_[i].src, confirm_data_[i].bytes);
    offset += align_up(confirm_data_[i].bytes);
  }
  RecordHeader h{};
  h.magic = kRecordMagic;
  h.entries = static_cast<uint16_t>(entries_.size());
  h.withdrawals = static_cast<uint16_t>(withdrawals_.size());
  h.round = round_;
  h.bytes = offset;
  h.label_bytes = static_cast<uint32_t>(labels_.size());
  h.confirms = static_cast<uint16_t>(confirms_.size());
  h.flags = flags_;
  std::memcpy(buf_, &h, sizeof(h));
  char* p = buf_ + sizeof(h);
  if (!entries_.empty()) std::memcpy(p, entries_.data(), entries_.size() * sizeof(RecordEntry));
  p += entries_.size() * sizeof(RecordEntry);
  if (!withdrawals_.empty()) {
    std::memcpy(p, withdrawals_.data(), withdrawals_.size() * sizeof(RecordKey));
  }
  p += withdrawals_.size() * sizeof(RecordKey);
  if (!confirms_.empty()) {
    std::memcpy(p, &digest_, kDigestBytes);
    std::memcpy(p + kDigestBytes, confirms_.data(), confirms_.size() * sizeof(RecordConfirm));
  }
  if (!labels_.empty()) std::memcpy(buf_ + labels_at, labels_.data(), labels_.size());
  return offset;
}

std::string check_record_header(const char* rec, size_t bytes, uint64_t round, RecordHeader* out) {
  if (bytes < sizeof(RecordHeader))
    return str_cat("a negotiation record of only ", bytes, " bytes");
  RecordHeader& h = *out;
  std::memcpy(&h, rec, sizeof(h));
  if (h.magic != kRecordMagic) return "a negotiation record with a bad magic number";
  if (h.round != round) return str_cat("a record of round ", h.round, " in round ", round);
  if (h.bytes != bytes) return str_cat("a record that says ", h.bytes, " bytes but has ", bytes);
  if (h.entries > kMaxRecordEntries || h.withdrawals > kMaxRecordEntries ||
      h.confirms > kMaxRecordEntries) {
    return str_cat("a record of ", h.entries, " entries, ", h.withdrawals, " withdrawals and ",
                   h.confirms, " confirmations");
  }
  if (h.label_bytes > h.entries * kMaxLabelBytes) {
    return str_cat("a record with ", h.label_bytes, " bytes of labels for ", h.entries, " entries");
  }
  if ((h.flags & ~kRecordAllFlags) != 0) return str_cat("a record with unknown flags ", h.flags);
  if ((h.flags & kRecordSentAhead) && (h.entries + h.confirms != 1 || h.withdrawals != 0)) {
    return "a record that says it sent a first step ahead but announces not exactly one collective";
  }
  if (table_bytes(h.entries, h.withdrawals, h.confirms) + h.label_bytes > bytes) {
    return "a record shorter than its own table";
  }
  return "";
}

const char* check_record_entry(const RecordEntry& e, const RecordHeader& h, int size) {
  if (!valid_kind(e.kind) || !valid_dtype(e.dtype) || !valid_op(e.op) ||
      !valid_code<Algorithm>(e.algorithm) || (e.flags & ~kEntryAllFlags) != 0) {
    return "an entry with an unknown kind, dtype, op, algorithm or flag";
  }
  if (e.kind == static_cast<uint8_t>(algorithms::CollectiveKind::kBroadcast) &&
      (e.root < 0 || e.root >= size)) {
    return "a broadcast from a rank outside the job";
  }
  if (e.count > (uint64_t{1} << 60)) return "an entry of an impossible element count";
  const size_t labels_at = table_bytes(h.entries, h.withdrawals, h.confirms);
  const size_t labels_end = labels_at + h.label_bytes;  // <= bytes (check_record_header)
  if (e.label_bytes > kMaxLabelBytes || e.label_offset < labels_at || e.label_offset > labels_end ||
      e.label_bytes > labels_end - e.label_offset || e.reserved != 0) {
    return "an entry whose label lies outside the record's labels";
  }
  if (e.eager_bytes > 0) {
    const uint64_t want = e.count * dtype_size(static_cast<DType>(e.dtype));
    const size_t data_start = align_up(labels_end);
    if (!(e.flags & kEntryEager) || e.eager_bytes != want || e.eager_offset < data_start ||
        e.eager_offset % kRecordAlign != 0 || e.eager_offset > h.bytes ||
        e.eager_bytes > h.bytes - e.eager_offset) {
      return "an entry with inconsistent input bytes";
    }
  } else if (e.eager_offset != 0) {
    return "an entry with an input offset but no input";
  }
  return nullptr;
}

size_t record_confirms_at(const RecordHeader& h) {
  return table_bytes(h.entries, h.withdrawals, 0) + kDigestBytes;
}

const char* check_record_confirm(const RecordConfirm& c, const RecordHeader& h, const char* rec,
                                 Confirmation* out) {
  if ((c.flags & ~uint16_t{kEntryEager}) != 0) return "a confirmation with an unknown flag";
  out->slot = c.slot;
  out->seq = c.seq;
  out->eager = (c.flags & kEntryEager) != 0;
  out->data = nullptr;
  out->data_room = 0;
  if (c.eager_offset == 0) return nullptr;
  const size_t data_start =
      align_up(table_bytes(h.entries, h.withdrawals, h.confirms) + h.label_bytes);
  if (!out->eager || c.eager_offset < data_start || c.eager_offset % kRecordAlign != 0 ||
      c.eager_offset >= h.bytes) {
    return "a confirmation with an input outside the record's inputs";
  }
  out->data = rec + c.eager_offset;
  out->data_room = static_cast<size_t>(h.bytes - c.eager_offset);
  return nullptr;
}

void read_label(const char* rec, const RecordEntry& e, std::string* out) {
  out->assign(rec + e.label_offset, e.label_bytes);  // within the record (checked)
  for (char& c : *out) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  }
}

Descriptor entry_descriptor(const RecordEntry& e) {
  Descriptor d;
  d.kind = static_cast<algorithms::CollectiveKind>(e.kind);
  d.dtype = static_cast<DType>(e.dtype);
  d.op = static_cast<ReduceOp>(e.op);
  d.algorithm = e.algorithm;
  d.root = e.root;
  d.shape_tag = e.shape_tag;
  d.count = e.count;
  return d;
}

std::string parse_record(const char* rec, size_t bytes, uint64_t round, int size,
                         ParsedRecord* out) {
  out->entries.clear();
  out->withdrawals.clear();
  out->confirms.clear();
  out->digest = 0;
  RecordHeader h;
  std::string bad = check_record_header(rec, bytes, round, &h);
  if (!bad.empty()) return bad;
  out->entries.reserve(h.entries);
  for (size_t i = 0; i < h.entries; ++i) {
    RecordEntry e;
    std::memcpy(&e, rec + sizeof(RecordHeader) + i * sizeof(RecordEntry), sizeof(e));
    if (const char* why = check_record_entry(e, h, size))
      return str_cat("record entry ", i, ": ", why);
    Announcement a;
    a.key = {e.stream, e.seq};
    a.desc = entry_descriptor(e);
    a.eager = (e.flags & kEntryEager) != 0;
    a.external = (e.flags & kEntryExternal) != 0;
    if (e.eager_bytes > 0) {
      a.data = rec + e.eager_offset;
      a.data_bytes = static_cast<size_t>(e.eager_bytes);
    }
    read_label(rec, e, &a.label);
    out->entries.push_back(std::move(a));
  }
  const char* w = rec + sizeof(RecordHeader) + h.entries * sizeof(RecordEntry);
  for (size_t i = 0; i < h.withdrawals; ++i) {
    RecordKey k;
    std::memcpy(&k, w + i * sizeof(RecordKey), sizeof(k));
    out->withdrawals.push_back({k.stream, k.seq});
  }
  if (h.confirms == 0) return "";
  const size_t at = record_confirms_at(h);
  std::memcpy(&out->digest, rec + at - kDigestBytes, kDigestBytes);
  out->confirms.resize(h.confirms);
  for (size_t i = 0; i < h.confirms; ++i) {
    RecordConfirm c;
    std::memcpy(&c, rec + at + i * sizeof(RecordConfirm), sizeof(c));
    if (const char* why = check_record_confirm(c, h, rec, &out->confirms[i]))
      return str_cat("record confirmation ", i, ": ", why);
  }
  return "";
}

std::string describe(const Descriptor& d) {
  // Appends, not str_cat: it is built whenever a round is published.
  auto number = [](std::string& out, uint64_t v) {
    char buf[24];
    out.append(buf, std::to_chars(buf, buf + sizeof(buf), v).ptr);
  };
  std::string s = algorithms::kind_name(d.kind);
  s.append("(").append(dtype_name(d.dtype)).append(" x ");
  number(s, d.count);
  switch (d.kind) {
    case algorithms::CollectiveKind::kAllreduce:
      s.append(", op ").append(op_name(d.op)).append(", algorithm ");
      s.append(algorithm_name(static_cast<Algorithm>(d.algorithm)));
      break;
    case algorithms::CollectiveKind::kReduceScatter:
      s.append(", op ").append(op_name(d.op));
      break;
    case algorithms::CollectiveKind::kBroadcast:
      s.append(", root ");
      if (d.root < 0) s.push_back('-');
      number(s, static_cast<uint64_t>(d.root < 0 ? -int64_t{d.root} : d.root));
      break;
    default:
      break;
  }
  if (d.shape_tag) {
    static const char kHex[] = "0123456789abcdef";
    s.append(", shape digest ");
    for (int i = 7; i >= 0; --i) s.push_back(kHex[(d.shape_tag >> (4 * i)) & 0xf]);
  }
  return s.append(")");
}

}  // namespace pytfcomm
