#include "gpu/shrink_plan.h"

#include "common/error.h"

namespace pytfcomm::gpu {

ShrinkPlan plan_shrink(const std::vector<ReformFacts>& all, int group) {
  ShrinkPlan plan;
  if (all.empty() || group < 1) {
    plan.why_not = "no processes";
    return plan;
  }
  const ReformFacts& first = all[0];
  const int64_t n_new = static_cast<int64_t>(all.size()) * group;
  for (size_t r = 0; r < all.size(); ++r) {
    const ReformFacts& f = all[r];
    if (!f.kept) {
      plan.why_not = str_cat("process ", r, " kept no NCCL communicator of the old membership",
                             " (a joiner, an NCCL without ncclCommShrink, or none failed)");
      return plan;
    }
    if (f.token != first.token || f.old_nranks != first.old_nranks) {
      plan.why_not = str_cat("processes 0 and ", r, " kept different NCCL communicators");
      return plan;
    }
    if (f.old_first_rank < 0 || f.old_first_rank % group != 0 ||
        f.old_first_rank + group > f.old_nranks) {
      plan.why_not = str_cat("process ", r, "'s old NCCL rank ", f.old_first_rank,
                             " does not fit its old communicator of ", f.old_nranks, " ranks");
      return plan;
    }
    if (r > 0 && f.old_first_rank <= all[r - 1].old_first_rank) {
      plan.why_not = str_cat("the new ranks are not the old ones in their old order (process ", r,
                             " was NCCL rank ", f.old_first_rank, ", process ", r - 1, " rank ",
                             all[r - 1].old_first_rank, ")");
      return plan;
    }
  }
  if (n_new >= first.old_nranks) {
    plan.why_not = str_cat("no rank of the old ", first.old_nranks, " was lost");
    return plan;
  }
  // The old ranks that stay, and what ncclCommShrink makes of them: the
  // survivors renumbered in their old order, which must be the new
  // communicator's numbering.
  std::vector<int> survivors;
  for (const ReformFacts& f : all) {
    for (int i = 0; i < group; ++i) survivors.push_back(f.old_first_rank + i);
  }
  size_t next = 0;
  for (int old = 0; old < first.old_nranks; ++old) {
    if (next < survivors.size() && survivors[next] == old) {
      ++next;
    } else {
      plan.excluded.push_back(old);
    }
  }
  for (size_t k = 0; k < survivors.size(); ++k) {
    int below = 0;
    for (int e : plan.excluded) below += e < survivors[k] ? 1 : 0;
    PTC_ENFORCE(survivors[k] - below == static_cast<int>(k), "old NCCL rank ", survivors[k],
                " would become rank ", survivors[k] - below, ", not ", k);
  }
  plan.shrink = true;
  return plan;
}

}  // namespace pytfcomm::gpu
