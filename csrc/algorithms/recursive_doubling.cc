// Recursive doubling for small all-reduces: log2(p) rounds of whole-buffer
// exchanges instead of the ring's 2(n-1) steps. With n not a power of two,
// the first 2*(n-p) members pair up first (even ones hand their data to
// the odd neighbour and wait for the answer).
#include <cstring>

#include "algorithms/algorithms.h"
#include "common/reduce.h"

namespace pytfcomm::algorithms {

void recursive_doubling_allreduce(const Context& c, const Group& g, Phase phase, const void* in,
                                  void* out, size_t count, DType dt, ReduceOp op, int64_t divisor) {
  const int n = g.size();
  const int me = g.me;
  const size_t bytes = count * dtype_size(dt);
  if (in != out) std::memcpy(out, in, bytes);
  if (n > 1) {
    PhaseScope trace(c, "recursive_doubling");
    transport::Transport& t = c.transport;
    const transport::MessageMeta meta = c.with_phase(phase);
    char* tmp = static_cast<char*>(c.workspace.get(2, bytes));
    int p = 1;
    while (p * 2 <= n) p *= 2;
    const int rem = n - p;
    // Fold the extra members into their odd neighbours.
    int vme;  // index among the p members that take part in the doubling
    if (me < 2 * rem) {
      if (me % 2 == 0) {
        t.wait(t.post_send(g.global(me + 1), out, bytes, meta));
        t.wait(t.post_recv(g.global(me + 1), out, bytes, meta));
        return;  // the neighbour already divided for a mean
      }
      t.wait(t.post_recv(g.global(me - 1), tmp, bytes, meta));
      reduce(out, tmp, out, count, dt, op);  // lower member's data first
      vme = me / 2;
    } else {
      vme = me - rem;
    }
    auto real = [&](int v) { return v < rem ? 2 * v + 1 : v + rem; };
    for (int d = 1; d < p; d *= 2) {
      int vpartner = vme ^ d;
      int partner = g.global(real(vpartner));
      auto r = t.post_recv(partner, tmp, bytes, meta);
      auto s = t.post_send(partner, out, bytes, meta);
      t.wait(r);
      t.wait(s);
      // The same operand order on both sides makes both results identical.
      if (vme < vpartner) {
        reduce(out, out, tmp, count, dt, op);
      } else {
        reduce(out, tmp, out, count, dt, op);
      }
    }
    if (op == ReduceOp::kMean && divisor != 1) divide(out, out, count, dt, divisor);
    if (me < 2 * rem) t.wait(t.post_send(g.global(me - 1), out, bytes, meta));
    return;
  }
  if (op == ReduceOp::kMean && divisor != 1) divide(out, out, count, dt, divisor);
}

}  // namespace pytfcomm::algorithms
