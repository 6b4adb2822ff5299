// In-process combine of N local replicas (one per device) of the same
// arrays: the local half of every TensorFlow collective. Work is cut into
// chunks spread over the local pool; each chunk reads its N inputs once,
// side by side, and writes its part of `out` once (sums; other ops chain
// pairwise through the cached output chunk). Order is fixed (replica 0, 1,
// ..., N-1) and every chunk is computed once, so the bytes are identical no
// matter how chunks are scheduled, and every replica can share them.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/dtype.h"

namespace pytfcomm {

// One array to combine: `inputs` has one pointer per replica, each `count`
// elements of `dtype`; `out` must not overlap any input.
struct ReduceSpan {
  std::vector<const void*> inputs;
  void* out = nullptr;
  size_t count = 0;
  DType dtype = DType::kFloat32;
};

// Reduces every span with `op`. For kMean the result is divided by
// `mean_divisor` (the caller knows the number of contributions, which may
// include other processes). Throws pytfcomm::Error on bad arguments.
void local_reduce(const std::vector<ReduceSpan>& spans, ReduceOp op, int64_t mean_divisor);

// Bytes of one chunk of one input (PYTFCOMM_LOCAL_CHUNK_BYTES, default 256 KiB).
size_t local_chunk_bytes();

// Process-wide counters, so tests can prove that pytfcomm (not a TF
// fallback) did the work. Indexed by CounterKind.
enum class CounterKind : int {
  kAllReduceOps = 0,    // TF all-reduce op executions
  kBroadcastOps = 1,    // TF broadcast op executions
  kAllGatherOps = 2,    // TF all-gather op executions
  kReducedBytes = 3,    // bytes of output produced by local reductions
  kCrossWorkerOps = 4,  // collectives sent through a Communicator by the TF ops
  kFusedPacks = 5,      // fusion buffers reduced (each holds one or more tensors)
  kInPlaceInputs = 6,   // inputs TF handed over, all-reduced in place as their own output
  kCount = 7,
};
void count(CounterKind kind, int64_t delta = 1);
int64_t counter(CounterKind kind);

}  // namespace pytfcomm
