// Digests the ranks compare (common/digest.h, common/crc32.h, the fusion
// plan's list digest). Their values are part of the wire: the numbers below
// were computed with the code of 8e92c76, and a change of value is a change
// of protocol, never a refactoring.
#include <gtest/gtest.h>

#include <cstring>

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

}  // namespace
}  // namespace pytfcomm
