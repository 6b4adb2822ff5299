// Whether the survivors of a lost rank shrink the old NCCL communicator
// (gpu/shrink_plan.h): only when every process kept the same one and they
// are its survivors in their old order; the old -> new rank mapping is
// checked. Growth, another order, another communicator or nothing lost
// re-create. CUDA-free: built into the unit tests without a CUDA build.
#include <gtest/gtest.h>

#include <vector>

#include "gpu/shrink_plan.h"

namespace pytfcomm::gpu {
namespace {

ReformFacts kept(int old_first_rank, int old_nranks, uint64_t token = 7) {
  ReformFacts f;
  f.kept = 1;
  f.old_first_rank = old_first_rank;
  f.old_nranks = old_nranks;
  f.token = token;
  return f;
}

TEST(ShrinkPlan, SurvivorsInOrderShrinkWithoutTheLostRanks) {
  ShrinkPlan p = plan_shrink({kept(0, 3), kept(1, 3)}, 1);
  EXPECT_TRUE(p.shrink) << p.why_not;
  EXPECT_EQ(p.excluded, std::vector<int>{2});
  p = plan_shrink({kept(0, 4), kept(2, 4)}, 1);
  EXPECT_TRUE(p.shrink) << p.why_not;
  EXPECT_EQ(p.excluded, (std::vector<int>{1, 3}));
  // Two GPUs per process: old process 1 (NCCL ranks 2, 3) lost.
  p = plan_shrink({kept(0, 6, 9), kept(4, 6, 9)}, 2);
  EXPECT_TRUE(p.shrink) << p.why_not;
  EXPECT_EQ(p.excluded, (std::vector<int>{2, 3}));
}

TEST(ShrinkPlan, AJoinerRecreates) {
  ReformFacts joiner;  // kept nothing
  ShrinkPlan p = plan_shrink({kept(0, 3), kept(1, 3), joiner}, 1);
  EXPECT_FALSE(p.shrink);
  EXPECT_NE(p.why_not.find("process 2 kept no NCCL communicator"), std::string::npos) << p.why_not;
}

TEST(ShrinkPlan, AnotherOrderRecreates) {
  ShrinkPlan p = plan_shrink({kept(1, 3), kept(0, 3)}, 1);
  EXPECT_FALSE(p.shrink);
  EXPECT_NE(p.why_not.find("old order"), std::string::npos) << p.why_not;
  EXPECT_FALSE(plan_shrink({kept(0, 3), kept(0, 3)}, 1).shrink);  // one old rank twice
}

TEST(ShrinkPlan, DifferentOldCommunicatorsRecreate) {
  EXPECT_FALSE(plan_shrink({kept(0, 3, 1), kept(1, 3, 2)}, 1).shrink);
  EXPECT_FALSE(plan_shrink({kept(0, 3), kept(1, 4)}, 1).shrink);
}

TEST(ShrinkPlan, NothingLostOrRanksOutOfRangeRecreate) {
  ShrinkPlan p = plan_shrink({kept(0, 2), kept(1, 2)}, 1);
  EXPECT_FALSE(p.shrink);
  EXPECT_NE(p.why_not.find("no rank of the old 2 was lost"), std::string::npos) << p.why_not;
  EXPECT_FALSE(plan_shrink({kept(0, 3), kept(3, 3)}, 1).shrink);
  EXPECT_FALSE(plan_shrink({kept(0, 6), kept(3, 6)}, 2).shrink);  // not a process's first
  EXPECT_FALSE(plan_shrink({kept(-1, 3)}, 1).shrink);
  EXPECT_FALSE(plan_shrink({}, 1).shrink);
}

}  // namespace
}  // namespace pytfcomm::gpu
