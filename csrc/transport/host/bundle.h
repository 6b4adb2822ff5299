// The payload of a negotiation frame (rounds.cc): the records of `count`
// consecutive ranks (mod the job size) starting at `first`, which the
// sender holds at that step of the exchange. Layout, every part on a cache
// line (records carry collectives' inputs):
//
//   BundleHeader | uint64 size of each record | record of first | record of first + 1 | ...
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
  uint32_t count;
  uint32_t first;
  uint32_t reserved;
};
static_assert(sizeof(BundleHeader) == 16, "BundleHeader is part of the wire format");

inline size_t bundle_align(size_t n) {
  return (n + kBundleAlign - 1) / kBundleAlign * kBundleAlign;
}
// Bytes before the first record.
inline size_t bundle_table_bytes(size_t count) {
  return bundle_align(sizeof(BundleHeader) + count * sizeof(uint64_t));
}
// The most bytes a bundle of `count` records of up to `record_bytes` takes.
inline size_t bundle_capacity(size_t count, size_t record_bytes) {
  return bundle_table_bytes(count) + count * bundle_align(record_bytes);
}

// Writes a bundle into `out` (bundle_capacity() bytes): `records[i]` of
// `sizes[i]` bytes is rank first + i's. A record already at its place in
// `out` (the sender's own, built there) is not copied. Returns its size.
size_t write_bundle(char* out, uint32_t first, const char* const* records, const size_t* sizes,
                    size_t count);

// Where each record of a bundle is (offsets into it).
struct BundleView {
  std::vector<size_t> offset, bytes;
};

// Checks `bytes` of a bundle against what is expected (`first`, `count`,
// records of at most `max_record` bytes) and fills *out; "" when it is
// acceptable, else the reason.
std::string parse_bundle(const char* b, size_t bytes, uint32_t first, uint32_t count,
                         size_t max_record, BundleView* out);

}  // namespace pytfcomm::host
