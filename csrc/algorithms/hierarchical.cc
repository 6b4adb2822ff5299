// Two-level all-reduce for jobs spanning hosts: the heavy traffic stays on
// the fast local links and each host sends only 1/local_size of the buffer
// across the network per rank.
#include "algorithms/algorithms.h"

namespace pytfcomm::algorithms {

void hierarchical_allreduce(const Context& c, const Group& local, const Group& cross,
                            const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                            int64_t divisor, size_t small_bytes) {
  ReduceOp local_op = op == ReduceOp::kMean ? ReduceOp::kSum : op;
  // 1. Local reduce-scatter: local member i holds part i summed over this host.
  PhaseScope phase(c, "local_reduce_scatter");
  ring_reduce_scatter_inplace(c, local, Phase::kLocalReduceScatter, in, out, count, dtype, local_op,
                              1);
  // 2. All-reduce of my part with the same part on every other host.
  Range mine = split(count, local.size(), local.me);
  char* part = static_cast<char*>(out) + mine.begin * dtype_size(dtype);
  phase.next("cross_host");
  if (mine.count * dtype_size(dtype) <= small_bytes) {
    recursive_doubling_allreduce(c, cross, Phase::kCrossRecursiveDoubling, part, part, mine.count,
                                 dtype, op, divisor);
  } else {
    ring_allreduce(c, cross, Phase::kCrossRing, part, part, mine.count, dtype, op, divisor);
  }
  // 3. Local all-gather of the finished parts.
  phase.next("local_allgather");
  ring_allgather_inplace(c, local, Phase::kLocalAllgather, out, count, dtype);
}

}  // namespace pytfcomm::algorithms
