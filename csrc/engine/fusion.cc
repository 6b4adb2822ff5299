#include "engine/fusion.h"

#include <cstdint>
#include <cstring>

#include "common/error.h"
#include "common/logging.h"
#include "common/param.h"
#include "engine/fusion_plan.h"
#include "engine/fusion_queue.h"

namespace pytfcomm {

Fusion::Fusion(Communicator& comm) : comm_(comm) {}

Fusion::~Fusion() {
  std::lock_guard<std::mutex> lock(queue_mu_);
  queue_.reset();
}

void Fusion::allreduce_many(const std::vector<FusionRequest>& reqs, ReduceOp op,
                            Algorithm algorithm, double timeout_s, uint32_t tag,
                            size_t fusion_bytes, size_t direct_bytes) {
  const Params& p = params();
  if (fusion_bytes == 0) fusion_bytes = static_cast<size_t>(p.fusion_bytes);
  if (direct_bytes == 0) direct_bytes = static_cast<size_t>(p.fusion_direct_bytes);
  std::vector<FusionItem> items(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    const FusionRequest& r = reqs[i];
    PTC_CHECK_ARG(dtype_size(r.dtype) != 0, "tensor ", i, " has an unsupported dtype");
    PTC_CHECK_ARG(r.count == 0 || (r.in && r.out), "tensor ", i, " has a null buffer");
    const size_t nbytes = r.count * dtype_size(r.dtype);
    const auto a = reinterpret_cast<uintptr_t>(r.in), b = reinterpret_cast<uintptr_t>(r.out);
    PTC_CHECK_ARG(a == b || nbytes == 0 || a + nbytes <= b || b + nbytes <= a, "tensor ", i,
                  ": its input and out overlap without being the same array; pass out=x for "
                  "in place, or an array of its own");
    PTC_CHECK_ARG(r.dtype != DType::kBool || op != ReduceOp::kMean, "tensor ", i,
                  ": op 'mean' is not defined for bool; use 'max' (any) or 'min' (all)");
    items[i] = {r.count, r.dtype};
  }
  const FusionPlan plan = plan_fusion(items, fusion_bytes, direct_bytes);
  const uint32_t digest = fusion_digest(items, tag);
  PTC_LOG(kDebug, "allreduce_many: ", reqs.size(), " tensors in ", plan.buckets.size(),
          " collective(s)");

  std::lock_guard<std::mutex> lock(mu_);
  char* buf =
      plan.max_packed_bytes ? static_cast<char*>(buffers_.get(0, plan.max_packed_bytes)) : nullptr;
  for (const FusionBucket& b : plan.buckets) {
    const size_t es = dtype_size(b.dtype);
    if (b.direct) {
      const FusionRequest& r = reqs[b.items[0]];
      comm_.allreduce(r.in, r.out, r.count, r.dtype, op, algorithm, timeout_s, digest);
      continue;
    }
    for (size_t k = 0; k < b.items.size(); ++k) {
      const FusionRequest& r = reqs[b.items[k]];
      std::memcpy(buf + b.offsets[k] * es, r.in, r.count * es);
    }
    comm_.allreduce(buf, buf, b.count, b.dtype, op, algorithm, timeout_s, digest);
    for (size_t k = 0; k < b.items.size(); ++k) {
      const FusionRequest& r = reqs[b.items[k]];
      std::memcpy(r.out, buf + b.offsets[k] * es, r.count * es);
    }
  }
}

std::shared_ptr<AsyncRequest> Fusion::allreduce_async(const FusionRequest& req, ReduceOp op,
                                                      Algorithm algorithm, double timeout_s,
                                                      uint32_t tag) {
  PTC_CHECK_ARG(dtype_size(req.dtype) != 0, "unsupported dtype");
  PTC_CHECK_ARG(req.count == 0 || (req.in && req.out), "null buffer");
  PTC_CHECK_ARG(req.dtype != DType::kBool || op != ReduceOp::kMean,
                "op 'mean' is not defined for bool; use 'max' (any) or 'min' (all)");
  std::lock_guard<std::mutex> lock(queue_mu_);
  if (!queue_) queue_ = std::make_unique<FusionQueue>(*this, comm_);
  return queue_->submit(req, op, algorithm, timeout_s, tag);
}

}  // namespace pytfcomm
