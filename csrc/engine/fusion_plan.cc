#include "engine/fusion_plan.h"

#include <algorithm>
#include <map>

#include "common/digest.h"
#include "common/error.h"

namespace pytfcomm {

FusionPlan plan_fusion(const std::vector<FusionItem>& items, size_t fusion_bytes,
                       size_t direct_bytes, size_t align_bytes) {
  PTC_CHECK_ARG(fusion_bytes >= 1, "fusion threshold must be at least 1 byte");
  PTC_CHECK_ARG(align_bytes == 0 || align_bytes % sizeof(double) == 0,
                "fusion alignment must be a multiple of every element size, got ", align_bytes);
  const size_t alone =
      direct_bytes == 0 ? fusion_bytes + 1 : std::min(direct_bytes, fusion_bytes + 1);
  FusionPlan plan;
  std::map<DType, size_t> open;  // dtype -> index of its bucket still filling
  for (size_t i = 0; i < items.size(); ++i) {
    const FusionItem& it = items[i];
    const size_t es = dtype_size(it.dtype);
    PTC_CHECK_ARG(es != 0, "request ", i, " has an invalid dtype");
    if (it.count == 0) continue;
    const size_t bytes = it.count * es;
    if (bytes >= alone) {
      FusionBucket b;
      b.dtype = it.dtype;
      b.direct = true;
      b.items = {i};
      b.offsets = {0};
      b.count = it.count;
      plan.buckets.push_back(std::move(b));
      continue;
    }
    auto o = open.find(it.dtype);
    if (o == open.end() || plan.buckets[o->second].bytes() + bytes > fusion_bytes) {
      FusionBucket b;
      b.dtype = it.dtype;
      open[it.dtype] = plan.buckets.size();
      plan.buckets.push_back(std::move(b));
      o = open.find(it.dtype);
    }
    FusionBucket& b = plan.buckets[o->second];
    b.items.push_back(i);
    b.offsets.push_back(b.count);
    b.count += it.count;
    const size_t align = align_bytes / es;  // in elements
    if (align > 1) b.count = (b.count + align - 1) / align * align;
  }
  for (const FusionBucket& b : plan.buckets) {
    if (!b.direct) plan.max_packed_bytes = std::max(plan.max_packed_bytes, b.bytes());
  }
  return plan;
}

uint32_t fusion_digest(const std::vector<FusionItem>& items, uint32_t salt) {
  FieldDigest32 d;
  d.mix(salt).mix(items.size());
  for (const FusionItem& it : items) d.mix(it.count).mix(static_cast<uint64_t>(it.dtype));
  return d.value();
}

}  // namespace pytfcomm
