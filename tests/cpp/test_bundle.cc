// Bundles of negotiation records (transport/host/bundle.h): what a rank
// writes reads back the same, equal records of consecutive ranks travel once,
// and what a peer could send wrong is refused.
#include <gtest/gtest.h>

#include <cstddef>
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
  const BundleRun run{1, UINT32_MAX};
  std::memcpy(huge.buf.data() + sizeof(BundleHeader) + 2 * sizeof(BundleRun), &run, sizeof(run));
  EXPECT_NE(parse_bundle(huge.buf.data(), huge.bytes, 6, 3, UINT64_MAX, &v), "");
}

// Equal records of consecutive ranks travel once: what a rank reads of each
// rank is still that rank's record, and a bundle of N equal records costs
// what one does.
TEST(Bundle, EqualRecordsTravelOnceAsARun) {
  const std::string same(64, 'c');
  Built one = build({same}, 4, 128);
  Built run = build({same, same, same, same, same}, 4, 128);
  EXPECT_EQ(run.bytes, one.bytes);
  BundleHeader h;
  std::memcpy(&h, run.buf.data(), sizeof(h));
  EXPECT_EQ(h.count, 5u);
  EXPECT_EQ(h.runs, 1u);
  BundleView v;
  ASSERT_EQ(parse_bundle(run.buf.data(), run.bytes, 4, 5, 128, &v), "");
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(v.offset[i], v.offset[0]);
    EXPECT_EQ(std::string(run.buf.data() + v.offset[i], v.bytes[i]), same);
  }
}

TEST(Bundle, MixedRunsKeepEveryRanksRecord) {
  // Runs of 2, 1, 3 and 1: a record differs in its last byte, in its size,
  // or is empty; equal records apart from each other are not merged.
  const std::string a(64, 'a'), b = std::string(63, 'a') + "b", c(10, 'a');
  const std::vector<std::string> recs = {a, a, b, c, c, c, a, "", ""};
  Built bb = build(recs, 0, 128);
  BundleHeader h;
  std::memcpy(&h, bb.buf.data(), sizeof(h));
  EXPECT_EQ(h.runs, 5u);
  EXPECT_EQ(bb.bytes, bundle_table_bytes(5) + 64 + 64 + 64 + 64 + 0);
  BundleView v;
  ASSERT_EQ(parse_bundle(bb.buf.data(), bb.bytes, 0, 9, 128, &v), "");
  for (size_t i = 0; i < recs.size(); ++i) {
    EXPECT_EQ(v.offset[i] % kBundleAlign, 0u);
    ASSERT_EQ(v.bytes[i], recs[i].size()) << i;
    EXPECT_EQ(std::string(bb.buf.data() + v.offset[i], v.bytes[i]), recs[i]) << i;
  }
  EXPECT_EQ(v.offset[1], v.offset[0]);
  EXPECT_NE(v.offset[2], v.offset[1]);
  EXPECT_NE(v.offset[6], v.offset[0]);
}

// A run table a peer could send wrong: counts that do not add up to the
// ranks due (short, long, zero, wrapping), a run count of 0 or over the
// ranks, a run's size over the limit or past the end.
TEST(Bundle, RefusesRunsThatDoNotAddUp) {
  const std::string a(64, 'a'), b(64, 'b');
  Built good = build({a, a, b}, 2, 128);  // runs (2, 64), (1, 64)
  BundleView v;
  ASSERT_EQ(parse_bundle(good.buf.data(), good.bytes, 2, 3, 128, &v), "");
  auto with_run = [&](uint32_t index, uint32_t count, uint32_t bytes) {
    Built bad = good;
    const BundleRun run{count, bytes};
    std::memcpy(bad.buf.data() + sizeof(BundleHeader) + index * sizeof(BundleRun), &run,
                sizeof(run));
    return parse_bundle(bad.buf.data(), bad.bytes, 2, 3, 128, &v);
  };
  auto with_runs = [&](uint32_t runs) {
    Built bad = good;
    std::memcpy(bad.buf.data() + offsetof(BundleHeader, runs), &runs, sizeof(runs));
    return parse_bundle(bad.buf.data(), bad.bytes, 2, 3, 128, &v);
  };
  EXPECT_EQ(with_run(0, 2, 64), "");
  EXPECT_NE(with_run(0, 1, 64), "");           // 1 + 1 of 3 ranks
  EXPECT_NE(with_run(0, 3, 64), "");           // 3 + 1 of 3
  EXPECT_NE(with_run(0, 0, 64), "");           // an empty run
  EXPECT_NE(with_run(1, UINT32_MAX, 64), "");  // would wrap a sum
  EXPECT_NE(with_run(0, 2, 129), "");          // over the limit
  EXPECT_NE(with_run(1, 1, 65), "");           // past the bundle's end
  EXPECT_NE(with_runs(0), "");
  EXPECT_NE(with_runs(4), "");
  EXPECT_NE(with_runs(UINT32_MAX), "");
  EXPECT_NE(with_runs(1), "");  // the first run then covers 2 of 3 ranks
}

}  // namespace
}  // namespace pytfcomm::host
