// The fusion plan (engine/fusion_plan.h): grouping, order, thresholds, digest.
#include <gtest/gtest.h>

#include "engine/fusion_plan.h"

namespace pytfcomm {
namespace {

std::vector<FusionItem> items(std::initializer_list<std::pair<size_t, DType>> list) {
  std::vector<FusionItem> out;
  for (auto [count, dtype] : list) out.push_back({count, dtype});
  return out;
}

TEST(FusionPlan, GroupsByDtypeInListOrder) {
  const DType f = DType::kFloat32, d = DType::kFloat64;
  FusionPlan p = plan_fusion(items({{4, f}, {2, d}, {0, f}, {3, f}, {1, d}}), 1 << 20, 0);
  ASSERT_EQ(p.buckets.size(), 2u);
  EXPECT_EQ(p.buckets[0].dtype, f);
  EXPECT_EQ(p.buckets[0].items, (std::vector<size_t>{0, 3}));  // the empty one is skipped
  EXPECT_EQ(p.buckets[0].offsets, (std::vector<size_t>{0, 4}));
  EXPECT_EQ(p.buckets[0].count, 7u);
  EXPECT_EQ(p.buckets[1].items, (std::vector<size_t>{1, 4}));
  EXPECT_EQ(p.buckets[1].count, 3u);
  EXPECT_EQ(p.max_packed_bytes, 28u);
}

TEST(FusionPlan, ThresholdClosesBucketsAndLargeTensorsGoAlone) {
  const DType f = DType::kFloat32;
  // 16-byte buffers: 2 + 2 floats fit, the third opens a new buffer; 5 floats
  // (20 bytes) exceed the threshold and go alone without closing the open one.
  FusionPlan p = plan_fusion(items({{2, f}, {2, f}, {2, f}, {5, f}, {1, f}}), 16, 0);
  ASSERT_EQ(p.buckets.size(), 3u);
  EXPECT_EQ(p.buckets[0].items, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(p.buckets[1].items, (std::vector<size_t>{2, 4}));
  EXPECT_TRUE(p.buckets[2].direct);
  EXPECT_EQ(p.buckets[2].items, (std::vector<size_t>{3}));
  EXPECT_EQ(p.max_packed_bytes, 16u);
}

TEST(FusionPlan, DirectThreshold) {
  const DType f = DType::kFloat32;
  FusionPlan p = plan_fusion(items({{3, f}, {4, f}, {1, f}}), 1 << 20, 16);
  ASSERT_EQ(p.buckets.size(), 2u);
  EXPECT_FALSE(p.buckets[0].direct);
  EXPECT_EQ(p.buckets[0].items, (std::vector<size_t>{0, 2}));
  EXPECT_TRUE(p.buckets[1].direct);
  EXPECT_EQ(p.buckets[1].items, (std::vector<size_t>{1}));
}

TEST(FusionPlan, EverythingEmptyMeansNoCollective) {
  FusionPlan p = plan_fusion(items({{0, DType::kInt8}, {0, DType::kFloat16}}), 64, 0);
  EXPECT_TRUE(p.buckets.empty());
  EXPECT_EQ(p.max_packed_bytes, 0u);
}

TEST(FusionPlan, DigestSeesOrderCountsDtypesAndSalt) {
  const DType f = DType::kFloat32, i = DType::kInt32;
  const uint32_t base = fusion_digest(items({{4, f}, {8, f}}), 7);
  EXPECT_EQ(base, fusion_digest(items({{4, f}, {8, f}}), 7));
  EXPECT_NE(base, fusion_digest(items({{8, f}, {4, f}}), 7));
  EXPECT_NE(base, fusion_digest(items({{4, f}, {8, i}}), 7));
  EXPECT_NE(base, fusion_digest(items({{4, f}, {8, f}, {0, f}}), 7));
  EXPECT_NE(base, fusion_digest(items({{4, f}, {8, f}}), 8));
}

TEST(FusionPlan, AlignmentPadsPackedRequestsAndCountsThePadding) {
  // The TF kernel's plan (64-byte aligned tensors, direct from 256 bytes):
  // 12 + 140 bytes fill 256 padded bytes, so the 4-byte tensor opens a new
  // buffer; 8448 and 400 bytes go alone; the empty tensor needs none.
  const DType f = DType::kFloat32;
  FusionPlan p = plan_fusion(items({{3, f}, {35, f}, {1, f}, {2112, f}, {8, f}, {0, f}, {100, f}}),
                             256, 256, 64);
  ASSERT_EQ(p.buckets.size(), 4u);
  EXPECT_EQ(p.buckets[0].items, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(p.buckets[0].offsets, (std::vector<size_t>{0, 16}));  // elements
  EXPECT_EQ(p.buckets[0].bytes(), 256u);
  EXPECT_EQ(p.buckets[1].items, (std::vector<size_t>{2, 4}));
  EXPECT_EQ(p.buckets[1].offsets, (std::vector<size_t>{0, 16}));
  EXPECT_EQ(p.buckets[1].bytes(), 128u);
  EXPECT_TRUE(p.buckets[2].direct);
  EXPECT_TRUE(p.buckets[3].direct);
  EXPECT_EQ(p.buckets[3].items, (std::vector<size_t>{6}));
  EXPECT_THROW(plan_fusion(items({{1, f}}), 64, 0, 12), std::exception);
}

TEST(FusionPlan, RejectsZeroThreshold) {
  EXPECT_THROW(plan_fusion(items({{1, DType::kFloat32}}), 0, 0), std::exception);
}

}  // namespace
}  // namespace pytfcomm
