// The bytes one rank contributes to a negotiation round (docs/negotiation.md):
// the collectives it asks for that it has not announced before (key,
// descriptor, a label for messages, and for small ones their input, so that
// a round in which every rank asks for the same collective completes it with
// no further message), and the keys it withdraws (their callers gave up).
// A collective whose stream, descriptor and label every rank's cache of
// agreed collectives holds (agreed_cache.h) goes as a confirmation instead:
// its cache slot and sequence number, 16 bytes and no label, after the
// sender's cache digest.
//
// Written by this rank, read by every other rank: every field is validated
// by parse_record() before use, like any other bytes from the network.
//
// Layout: header, entries, withdrawals, (when there are confirmations) the
// cache digest and the confirmations, the entries' labels (packed, each at
// most kMaxLabelBytes), then each eager input on a cache line.
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
  uint32_t label_bytes;  // the labels after the table
  uint16_t confirms;     // confirmations (cache slots) after the withdrawals
  uint16_t flags;        // RecordFlags
};
static_assert(sizeof(RecordHeader) == 32, "RecordHeader is part of the wire format");

enum RecordFlags : uint16_t {
  // The sender's one announcement (no other entry, confirmation or
  // withdrawal) is a pairwise all-reduce whose first message
  // (algorithms::first_send) it sent right behind this record
  // (RoundChannel::send_ahead).
  kRecordSentAhead = 1,
  kRecordAllFlags = 1,
};

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

// A collective announced by its slot in the agreed cache (agreed_cache.h):
// the receiver's own cache, the same on every rank (the digest before the
// confirmations says so), gives its stream, descriptor and label.
struct RecordConfirm {
  uint64_t seq;
  uint32_t eager_offset;  // where its input starts in the record (0: none)
  uint16_t slot;
  uint16_t flags;  // RecordEntryFlags (kEntryEager only)
};
static_assert(sizeof(RecordConfirm) == 16, "RecordConfirm is part of the wire format");

// One confirmation as read from a record; the input's size is the slot's.
struct Confirmation {
  uint16_t slot = 0;
  uint64_t seq = 0;
  bool eager = false;
  const char* data = nullptr;  // its input in the record, or null
  size_t data_room = 0;        // bytes from `data` to the record's end
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
  std::vector<Confirmation> confirms;  // expanded into entries by the negotiator
  uint64_t digest = 0;                 // the sender's cache digest (with confirms)
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
  // Room for one more confirmation carrying `data_bytes` of input?
  bool fits_confirm(size_t data_bytes) const;
  // Adds a confirmation of `r` by cache slot `slot` (its cache's digest is
  // `digest`, the same for every confirmation of one record).
  void add_confirm(const Request& r, uint16_t slot, uint64_t digest, bool eager, const void* data,
                   size_t data_bytes);
  // Sets kRecordSentAhead (the caller checks that one announcement is all).
  void set_sent_ahead() { flags_ |= kRecordSentAhead; }
  // Finishes the record; returns its size in bytes.
  size_t finish();
  size_t entries() const { return entries_.size(); }
  size_t confirms() const { return confirms_.size(); }

 private:
  char* buf_ = nullptr;
  size_t capacity_ = 0;
  uint64_t round_ = 0;
  std::vector<RecordEntry> entries_;
  std::vector<RecordKey> withdrawals_;
  std::vector<RecordConfirm> confirms_;
  uint64_t digest_ = 0;
  uint16_t flags_ = 0;
  struct Data {
    const void* src;
    size_t bytes;
  };
  std::vector<Data> data_;          // by entry
  std::vector<Data> confirm_data_;  // by confirmation
  size_t data_bytes_ = 0;           // sum of aligned data sizes so far
  std::string labels_;              // the entries' labels, packed
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
// Where the confirmations start (the digest is the 8 bytes before them).
size_t record_confirms_at(const RecordHeader& h);
// Checks confirmation `c` of a record whose header is `h`; null when fine.
// Pointers in *out point into `rec`.
const char* check_record_confirm(const RecordConfirm& c, const RecordHeader& h, const char* rec,
                                 Confirmation* out);
Descriptor entry_descriptor(const RecordEntry& e);
// A checked entry's label, control and non-ASCII bytes as '?'.
void read_label(const char* rec, const RecordEntry& e, std::string* out);

// "allreduce(float32 x 1024, op sum, algorithm auto, shape 0x1234abcd)".
std::string describe(const Descriptor& d);

}  // namespace pytfcomm
