// Bundles of negotiation records (transport/host/bundle.h): what a rank
// writes reads back the same, and what a peer could send wrong is refused.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "transport/host/bundle.h"

namespace pytfcomm::host {
namespace {

struct Built {
  std::vector<char> buf;
  size_t bytes = 0;
};

Built build(const std::vector<std::string>& recs, uint32_t first, size_t max_record) {
  Built b;
  b.buf.assign(bundle_capacity(recs.size(), max_record), '\x55');
  std::vector<const char*> ptrs;
  std::vector<size_t> sizes;
  for (const auto& r : recs) {
    ptrs.push_back(r.data());
    sizes.push_back(r.size());
  }
  b.bytes = write_bundle(b.buf.data(), first, ptrs.data(), sizes.data(), recs.size());
  return b;
}

// Records of 0, 5 and 70 bytes: none, short, over a cache line.
const std::vector<std::string> kRecs = {"", "hello", std::string(70, 'x')};

TEST(Bundle, RoundTripAlignsEveryRecord) {
  Built b = build(kRecs, 6, 128);
  EXPECT_EQ(b.bytes, bundle_table_bytes(3) + 0 + 64 + 128);
  EXPECT_LE(b.bytes, bundle_capacity(3, 128));
  BundleView v;
  ASSERT_EQ(parse_bundle(b.buf.data(), b.bytes, 6, 3, 128, &v), "");
  for (size_t i = 0; i < kRecs.size(); ++i) {
    EXPECT_EQ(v.offset[i] % kBundleAlign, 0u);
    ASSERT_EQ(v.bytes[i], kRecs[i].size());
    EXPECT_EQ(std::string(b.buf.data() + v.offset[i], v.bytes[i]), kRecs[i]);
  }
}

TEST(Bundle, OwnRecordBuiltInPlaceIsNotCopied) {
  std::vector<char> buf(bundle_capacity(1, 64));
  char* own = buf.data() + bundle_table_bytes(1);
  std::memcpy(own, "mine", 4);
  const char* ptrs[] = {own};
  size_t sizes[] = {4};
  size_t n = write_bundle(buf.data(), 2, ptrs, sizes, 1);
  BundleView v;
  ASSERT_EQ(parse_bundle(buf.data(), n, 2, 1, 64, &v), "");
  EXPECT_EQ(std::string(buf.data() + v.offset[0], 4), "mine");
}

TEST(Bundle, RefusesWhatThePeerWasNotToSend) {
  Built b = build(kRecs, 6, 128);
  BundleView v;
  // Another sender's records, or another count, than this step expects.
  EXPECT_NE(parse_bundle(b.buf.data(), b.bytes, 5, 3, 128, &v), "");
  EXPECT_NE(parse_bundle(b.buf.data(), b.bytes, 6, 2, 128, &v), "");
  // A record over the agreed limit.
  EXPECT_NE(parse_bundle(b.buf.data(), b.bytes, 6, 3, 69, &v), "");
  // Cut short: in the table, and inside the last record.
  EXPECT_NE(parse_bundle(b.buf.data(), 10, 6, 3, 128, &v), "");
  EXPECT_NE(parse_bundle(b.buf.data(), bundle_table_bytes(3) + 64 + 69, 6, 3, 128, &v), "");
  // Not a bundle at all.
  Built bad = b;
  bad.buf[0] ^= 1;
  EXPECT_NE(parse_bundle(bad.buf.data(), bad.bytes, 6, 3, 128, &v), "");
  // A size field that would wrap the arithmetic.
  Built huge = b;
  const uint64_t n = UINT64_MAX - 8;
  std::memcpy(huge.buf.data() + sizeof(BundleHeader) + 2 * sizeof(uint64_t), &n, sizeof(n));
  EXPECT_NE(parse_bundle(huge.buf.data(), huge.bytes, 6, 3, UINT64_MAX, &v), "");
}

}  // namespace
}  // namespace pytfcomm::host
