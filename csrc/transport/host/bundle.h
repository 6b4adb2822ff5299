// The payload of a negotiation frame (rounds.cc): the records of `count`
// consecutive ranks (mod the job size) starting at `first`, which the
// sender holds at that step of the exchange. Consecutive ranks whose records
// are byte-identical (the steady state: every rank confirms the same agreed
// collective, docs/negotiation.md) form a run, whose record travels once.
// Layout, every part on a cache line (records carry collectives' inputs):
//
//   BundleHeader | BundleRun of each run | record of the first run | of the second | ...
//
// Written by a peer: parse_bundle() checks every field against what this
// rank expects of that peer at that step before anything is read from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pytfcomm::host {

constexpr uint32_t kBundleMagic = 0x4c444e42;  // "BNDL"
constexpr size_t kBundleAlign = 64;

struct BundleHeader {
  uint32_t magic;
  uint32_t count;  // ranks whose records it carries
  uint32_t first;
  uint32_t runs;  // records it holds: 1 to count
};
static_assert(sizeof(BundleHeader) == 16, "BundleHeader is part of the wire format");

// `count` consecutive ranks whose record is the same `bytes` bytes.
struct BundleRun {
  uint32_t count;
  uint32_t bytes;
};
static_assert(sizeof(BundleRun) == 8, "BundleRun is part of the wire format");

inline size_t bundle_align(size_t n) {
  return (n + kBundleAlign - 1) / kBundleAlign * kBundleAlign;
}
// Bytes before the first record of a bundle of `runs` runs.
inline size_t bundle_table_bytes(size_t runs) {
  return bundle_align(sizeof(BundleHeader) + runs * sizeof(BundleRun));
}
// The most bytes a bundle of `count` records of up to `record_bytes` takes
// (every record different).
inline size_t bundle_capacity(size_t count, size_t record_bytes) {
  return bundle_table_bytes(count) + count * bundle_align(record_bytes);
}

// Writes a bundle into `out` (bundle_capacity() bytes): `records[i]` of
// `sizes[i]` bytes (< 4 GiB) is rank first + i's; a record equal to the one
// before it (same bytes) joins its run. A record already at its place in
// `out` (the sender's own, built there) is not copied. Returns its size.
size_t write_bundle(char* out, uint32_t first, const char* const* records, const size_t* sizes,
                    size_t count);

// Where each rank's record of a bundle is (offsets into it); the ranks of a
// run share one.
struct BundleView {
  std::vector<size_t> offset, bytes;
};

// Checks `bytes` of a bundle against what is expected (`first`, `count`,
// records of at most `max_record` bytes) and fills *out; "" when it is
// acceptable, else the reason.
std::string parse_bundle(const char* b, size_t bytes, uint32_t first, uint32_t count,
                         size_t max_record, BundleView* out);

}  // namespace pytfcomm::host
