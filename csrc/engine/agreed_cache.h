// The cache of agreed collectives (docs/negotiation.md, "Agreed collectives
// in the steady state"): what a record may name by a slot number instead of
// spelling it out. A slot holds a stream, a descriptor, whether another
// backend moves the data, and a label (without the " #<seq>" that numbered
// labels carry, put back on expansion), of a collective every rank asked for and agreed on.
//
// Every rank changes its cache at the same points of the same rounds (after
// the decisions, from what every rank holds alike: the decided keys, their
// descriptors and the lowest rank's label), so every rank's cache is the
// same; a record that names slots carries its sender's digest, and a record
// whose digest is not this rank's own is an error on every rank, never a
// guess. A confirmation is expanded into the very announcement it stands
// for (the sender's own key, descriptor and label), so the negotiator
// decides, orders and reports disagreements exactly as for a full entry.
//
// Without I/O, used by the negotiator (expand, learn, invalidate) and by the
// driver (slot_of, when it writes a record).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/request.h"
#include "engine/round_record.h"

namespace pytfcomm {

class AgreedCache {
 public:
  static constexpr size_t kSlots = 256;

  // The slot that stands for this rank's request `r` (-1: none).
  int slot_of(const Request& r) const;
  uint64_t digest() const { return digest_; }
  size_t size() const { return index_.size(); }

  // The announcement that confirmation `c` of a record stands for; "" when
  // fine, else why it cannot be (its slot is empty, its input's size is not
  // the slot's).
  std::string expand(const Confirmation& c, Announcement* out) const;

  // The engine's fast path: the one collective a record of `round` (`bytes`
  // long, from a job of `size` ranks) announces, in full or by slot, when it
  // announces exactly one and withdraws nothing; false otherwise, and for
  // anything the full path would refuse (which it then explains). The label
  // only when `label`.
  bool only_announcement(const char* rec, size_t bytes, uint64_t round, int size, bool label,
                         Announcement* out) const;

  // A collective every rank asked for and agreed on was decided: `label` is
  // the lowest rank's (the same on every rank).
  void learn(const CollectiveKey& k, const Descriptor& d, bool external, const std::string& label);
  // Forgets every slot (a mismatch, a withdrawal, a join, a resync).
  void invalidate();

 private:
  struct Slot {
    uint64_t stream = 0;
    Descriptor desc;
    bool external = false;
    size_t at = std::string::npos;  // where " #<seq>" was cut out of the label (npos: none)
    std::string stem;
    uint64_t used = 0;        // the learn() count when last decided
    uint64_t index_hash = 0;  // its pattern_hash (its index_ key)
    uint64_t hash = 0;        // of all of the above but `used`, and the slot
    bool live = false;
  };
  // Hash of what a slot matches on (its index_ key).
  static uint64_t pattern_hash(uint64_t stream, const Descriptor& d, bool external,
                               uint64_t label_hash);
  // The live slot of this pattern (`stem`: agreed_cache.cc's Stem), or -1.
  int find(uint64_t hash, uint64_t stream, const Descriptor& d, bool external,
           const void* stem) const;
  void rehash_digest();

  std::vector<Slot> slots_ = std::vector<Slot>(kSlots);
  std::unordered_multimap<uint64_t, int> index_;  // pattern hash -> slot
  uint64_t clock_ = 0;                            // learn() calls
  uint64_t epoch_ = 0;                            // invalidate() calls
  uint64_t content_ = 0;                          // xor of the live slots' hashes
  uint64_t digest_ = 0;
};

// Adds this rank's request `r` to record `w`: by its slot when `cache` (null:
// always in full) holds one, else in full; its input (`data_bytes` from
// r.in; 0: none) rides along when there is room, else it runs after the
// round. False when not even that fits (the next record takes it).
bool add_announcement(RecordWriter& w, const AgreedCache* cache, const Request& r, bool eager,
                      size_t data_bytes);

}  // namespace pytfcomm
