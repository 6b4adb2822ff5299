// Digests the ranks compare (common/digest.h, common/crc32.h, the fusion
// plan's list digest). Their values are part of the wire: the numbers below
// were computed with the code of 8e92c76, and a change of value is a change
// of protocol, never a refactoring.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "common/crc32.h"
#include "common/digest.h"
#include "engine/fusion_plan.h"

namespace pytfcomm {
namespace {

TEST(Digest, Fnv1a64ValuesArePinned) {
  EXPECT_EQ(fnv1a64(""), 14695981039346656037ull);
  EXPECT_EQ(fnv1a64("op:train_step#3"), 16392053430648139299ull);
  EXPECT_EQ(fnv1a64_mix(fnv1a64(""), 5), 1000385178204227360ull);
}

TEST(Digest, FusionDigestValuesArePinned) {
  const DType f = DType::kFloat32, d = DType::kFloat64, h = DType::kFloat16;
  EXPECT_EQ(fusion_digest({}, 0), 1768495365u);
  EXPECT_EQ(fusion_digest({{4, f}, {2, d}}, 7), 854659495u);
  EXPECT_EQ(fusion_digest({{1000, h}, {0, f}, {3, d}}, 0xdeadbeefu), 1292451459u);
}

TEST(Digest, Crc32OfShapeReprsIsZlibs) {
  auto crc = [](const char* s) { return crc32(s, std::strlen(s)); };
  EXPECT_EQ(crc("()"), 1580606521u);
  EXPECT_EQ(crc("(7,)"), 509958170u);
  EXPECT_EQ(crc("(2, 3)"), 3853280804u);
  EXPECT_EQ(crc("(1, 2, 3, 4)"), 1584751421u);
}

TEST(Digest, FieldDigestIsTheFormerInlineCopies) {
  // The TF all-reduce's buffer tag (dims, then each dimension, of each
  // member) and the GPU group digest, as 8e92c76 computed them inline.
  auto tf_tag = [](std::initializer_list<std::vector<uint64_t>> shapes) {
    FieldDigest32 d;
    for (const auto& s : shapes) {
      d.mix(s.size());
      for (uint64_t dim : s) d.mix(dim);
    }
    return d.value();
  };
  EXPECT_EQ(tf_tag({{}}), 2615243109u);
  EXPECT_EQ(tf_tag({{2, 3}}), 820658694u);
  EXPECT_EQ(tf_tag({{2, 3}, {7}, {}}), 229168096u);
  FieldDigest32 gpu;
  for (uint64_t f : {1, 0, 0, 2, 4, 2}) gpu.mix(f);
  EXPECT_EQ(gpu.nonzero(), 2951042112u);
  EXPECT_EQ(FieldDigest32().nonzero(), 2166136261u);
}

TEST(Digest, ShapeDigestIsZlibOfPythonsRepr) {
  const int64_t dims[] = {1, 2, 3, 4};
  EXPECT_EQ(shape_digest(dims, 0), 1580606521u);     // ()
  EXPECT_EQ(shape_digest(dims + 3, 1), 472114755u);  // (4,)
  EXPECT_EQ(shape_digest(dims, 4), 1584751421u);
  const int64_t big[] = {int64_t{1} << 40, 3};
  EXPECT_EQ(shape_digest(big, 2), 1973635853u);
  EXPECT_EQ(shapes_digest({}), 223132457u);
  EXPECT_EQ(shapes_digest({{2, 3}, {}, {4}}), 1927222616u);
}

}  // namespace
}  // namespace pytfcomm
