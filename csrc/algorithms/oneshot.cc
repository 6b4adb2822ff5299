// One-shot all-reduce for small buffers over memory every rank maps: one
// publish, one wait, then every rank reduces the N inputs itself in rank
// order (0, 1, ..., n-1), so all results are bitwise identical, with no
// message on the wire at all.
#include <vector>

#include "algorithms/algorithms.h"
#include "common/error.h"
#include "common/reduce.h"

namespace pytfcomm::algorithms {

void oneshot_allreduce(const Context& c, const Group& g, const void* in, void* out, size_t count,
                       DType dt, ReduceOp op, int64_t divisor) {
  transport::Transport& t = c.transport;
  const int n = g.size();
  // Ranks agree on a one-shot capacity only in jobs of two or more.
  PTC_ENFORCE(n >= 2 && n == t.size(), "one-shot all-reduce needs the whole world, got ", n, " of ",
              t.size());
  for (int i = 0; i < n; ++i) PTC_ENFORCE(g.global(i) == i, "one-shot group not in rank order");
  const size_t bytes = count * dtype_size(dt);
  PhaseScope trace(c, "oneshot");
  std::vector<const void*> src = t.oneshot_exchange(in, bytes, c.with_phase(Phase::kOneShot));
  if (count == 0) return;
  // ((x0 op x1) op x2) ... ; a mean divides once, in the last step.
  for (int i = 1; i < n; ++i) {
    const void* a = i == 1 ? src[0] : out;
    if (op == ReduceOp::kMean && i == n - 1) {
      reduce_divide(out, a, src[static_cast<size_t>(i)], count, dt, divisor);
    } else {
      reduce(out, a, src[static_cast<size_t>(i)], count, dt, op);
    }
  }
}

}  // namespace pytfcomm::algorithms
