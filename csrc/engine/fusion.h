// Tensor fusion on a Communicator: many all-reduces cost about one.
//
// allreduce_many() follows a FusionPlan (engine/fusion_plan.h): small
// requests of one dtype are copied back to back into a fusion buffer,
// reduced by one ordinary Communicator::allreduce (so sequence numbers,
// metadata checks and failure handling are the usual ones) and copied out;
// large ones are reduced straight in the caller's memory. Every collective
// carries a digest of the whole request list as its shape tag: ranks whose
// lists differ in length, order, counts or dtypes get a MismatchError on
// every rank, never each other's data.
//
// allreduce_async() is the "submitted close together" path: requests queue
// up, and a background thread fuses whatever the ranks have all submitted
// (engine/fusion_queue.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "algorithms/collective.h"
#include "common/dtype.h"
#include "engine/communicator.h"

namespace pytfcomm {

// One all-reduce of a list: `count` elements of `dtype` from `in` to `out`
// (`in` may equal `out`; different requests must not overlap).
struct FusionRequest {
  const void* in = nullptr;
  void* out = nullptr;
  size_t count = 0;
  DType dtype = DType::kFloat32;
};

class FusionQueue;
class AsyncRequest;

class Fusion {
 public:
  explicit Fusion(Communicator& comm);
  ~Fusion();  // stops the background thread (after the batch it is reducing)
  Fusion(const Fusion&) = delete;
  Fusion& operator=(const Fusion&) = delete;

  // Reduces every request with `op`; returns when all are done. `tag`: a
  // digest of the caller's shapes, folded into every collective's shape tag.
  // fusion_bytes / direct_bytes: 0 = PYTFCOMM_FUSION_BYTES /
  // PYTFCOMM_FUSION_DIRECT_BYTES. Thread-safe (calls are serialised).
  void allreduce_many(const std::vector<FusionRequest>& reqs, ReduceOp op, Algorithm algorithm,
                      double timeout_s, uint32_t tag, size_t fusion_bytes = 0,
                      size_t direct_bytes = 0);

  // Queues one all-reduce; the returned request completes (or fails) later.
  // Buffers must stay valid until then. Every rank must submit the same
  // requests in the same order.
  std::shared_ptr<AsyncRequest> allreduce_async(const FusionRequest& req, ReduceOp op,
                                                Algorithm algorithm, double timeout_s,
                                                uint32_t tag);

 private:
  Communicator& comm_;
  std::mutex mu_;                  // one allreduce_many at a time owns the buffers
  algorithms::Workspace buffers_;  // fusion buffers, grow-only
  std::mutex queue_mu_;
  std::unique_ptr<FusionQueue> queue_;  // started on the first allreduce_async
};

}  // namespace pytfcomm
