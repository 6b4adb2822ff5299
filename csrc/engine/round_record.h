// The bytes one rank contributes to a negotiation round (docs/negotiation.md):
// the collectives it asks for that it has not announced before (key,
// descriptor, a label for messages, and for small ones their input, so that
// a round in which every rank asks for the same collective completes it with
// no further message), and the keys it withdraws (their callers gave up).
//
// Written by this rank, read by every other rank: every field is validated
// by parse_record() before use, like any other bytes from the network.
//
// Layout: header, entries, withdrawals, the entries' labels (packed, each
// at most kMaxLabelBytes), then each eager input on a cache line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/request.h"

namespace pytfcomm {

constexpr uint32_t kRecordMagic = 0x4f47454e;  // "NEGO"
constexpr size_t kRecordAlign = 64;            // eager inputs start on a cache line
// The longest label a record carries: TF node names with their function's
// name, NumPy names. A longer one keeps its start and its end (clip_label).
constexpr size_t kMaxLabelBytes = 512;

struct RecordHeader {
  uint32_t magic;
  uint16_t entries;
  uint16_t withdrawals;
  uint64_t round;
  uint64_t bytes;        // the whole record
  uint32_t label_bytes;  // the labels after the withdrawals
  uint32_t reserved;
};
static_assert(sizeof(RecordHeader) == 32, "RecordHeader is part of the wire format");

enum RecordEntryFlags : uint32_t {
  kEntryEager = 1,     // the sender takes part in an in-round execution of it
  kEntryExternal = 2,  // another backend (the GPU's) moves its data
  kEntryAllFlags = 3,
};

struct RecordEntry {
  uint64_t stream;
  uint64_t seq;
  uint64_t count;
  uint64_t eager_offset;  // where its input starts in the record (0: none)
  uint64_t eager_bytes;
  uint32_t shape_tag;
  int32_t root;
  uint8_t kind, dtype, op, algorithm;
  uint32_t flags;         // RecordEntryFlags
  uint32_t label_offset;  // where its label starts in the record
  uint16_t label_bytes;   // <= kMaxLabelBytes
  uint16_t reserved;
};
static_assert(sizeof(RecordEntry) == 64, "RecordEntry is part of the wire format");

struct RecordKey {
  uint64_t stream;
  uint64_t seq;
};

// One announced collective as read from a record.
struct Announcement {
  CollectiveKey key;
  Descriptor desc;
  std::string label;
  bool eager = false;          // ready to run it in this round
  bool external = false;       // another backend (the GPU's) moves its data
  const char* data = nullptr;  // its input in the record, or null
  size_t data_bytes = 0;
};

struct ParsedRecord {
  std::vector<Announcement> entries;
  std::vector<CollectiveKey> withdrawals;
};

// Builds one record in a caller-owned buffer of `capacity` bytes. Reusable
// (reset()): its lists keep their memory, so a round allocates nothing.
class RecordWriter {
 public:
  RecordWriter() = default;
  RecordWriter(char* buf, size_t capacity, uint64_t round) { reset(buf, capacity, round); }
  void reset(char* buf, size_t capacity, uint64_t round);
  // Room for one more entry, `r`, carrying `data_bytes` of input (0: none)?
  bool fits(const Request& r, size_t data_bytes) const;
  // Adds an entry; `data` (may be null when data_bytes is 0) is copied in,
  // and its label: whole up to kMaxLabelBytes, else its start and its end
  // around "...".
  void add(const Request& r, bool eager, const void* data, size_t data_bytes);
  bool add_withdrawal(const CollectiveKey& k);
  // Finishes the record; returns its size in bytes.
  size_t finish();
  size_t entries() const { return entries_.size(); }

 private:
  char* buf_ = nullptr;
  size_t capacity_ = 0;
  uint64_t round_ = 0;
  std::vector<RecordEntry> entries_;
  std::vector<RecordKey> withdrawals_;
  struct Data {
    const void* src;
    size_t bytes;
  };
  std::vector<Data> data_;
  size_t data_bytes_ = 0;  // sum of aligned data sizes so far
  std::string labels_;     // the entries' labels, packed
};

// The most entries (and withdrawals) one record holds.
constexpr size_t kMaxRecordEntries = 256;

// Validates `bytes` of a record of `round`; "" and *out filled when it is
// acceptable, else the reason. Pointers in *out point into `rec`. `size` is
// the job size (roots must be ranks).
std::string parse_record(const char* rec, size_t bytes, uint64_t round, int size,
                         ParsedRecord* out);
// The same checks piecewise, without allocating (the engine's one-entry
// fast path): the header ("" when fine), then each entry (null when fine).
std::string check_record_header(const char* rec, size_t bytes, uint64_t round, RecordHeader* out);
const char* check_record_entry(const RecordEntry& e, const RecordHeader& h, int size);
Descriptor entry_descriptor(const RecordEntry& e);

// "allreduce(float32 x 1024, op sum, algorithm auto, shape 0x1234abcd)".
std::string describe(const Descriptor& d);

}  // namespace pytfcomm
