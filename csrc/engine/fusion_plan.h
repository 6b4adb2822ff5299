// The fusion plan: how a list of all-reduce requests becomes few
// collectives. Pure function of the list's counts, dtypes and the two
// thresholds, so every rank computes the same plan without talking.
//
// Requests keep their list order. Each dtype has at most one bucket still
// filling; a request joins it while the bucket stays within `fusion_bytes`,
// else the bucket closes and a new one opens. A request of `direct_bytes` or
// more (or above `fusion_bytes`) is its own collective, reduced straight
// from the caller's input into the caller's output: at that size the
// per-collective latency is small next to the two copies packing costs.
// Empty requests need no collective and appear in no bucket.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/dtype.h"

namespace pytfcomm {

// One request as the plan sees it.
struct FusionItem {
  size_t count = 0;  // elements
  DType dtype = DType::kFloat32;
};

// One collective of the plan.
struct FusionBucket {
  DType dtype = DType::kFloat32;
  bool direct = false;          // one request, reduced in the caller's memory
  std::vector<size_t> items;    // request indices, in list order
  std::vector<size_t> offsets;  // element offset of each in the fusion buffer
  size_t count = 0;             // elements of the collective
  size_t bytes() const { return count * dtype_size(dtype); }
};

struct FusionPlan {
  // Ordered by each bucket's first request, which is the order of the
  // collectives on the wire.
  std::vector<FusionBucket> buckets;
  size_t max_packed_bytes = 0;  // largest packed bucket (fusion buffer size)
};

// fusion_bytes >= 1; direct_bytes == 0 means "never direct below fusion_bytes".
// align_bytes > 0 (a multiple of 8): every packed request starts at a multiple
// of it, the padding counts towards fusion_bytes, and a packed bucket's count
// includes the padding after its last request (TF's kernels keep tensors
// aligned so inside one buffer).
FusionPlan plan_fusion(const std::vector<FusionItem>& items, size_t fusion_bytes,
                       size_t direct_bytes, size_t align_bytes = 0);

// 32-bit digest of the list (count, dtype of every request, and `salt`),
// carried as the shape tag of every collective of the plan so that ranks
// whose lists differ fail with a mismatch even when bucket sizes agree.
uint32_t fusion_digest(const std::vector<FusionItem>& items, uint32_t salt);

}  // namespace pytfcomm
