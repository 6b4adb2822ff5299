// Recursive doubling for small all-reduces: log2(p) rounds of whole-buffer
// exchanges instead of the ring's 2(n-1) steps. With n not a power of two,
// the first 2*(n-p) members fold in pairs first (fold.h).
#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/fold.h"
#include "common/reduce.h"

namespace pytfcomm::algorithms {

void recursive_doubling_allreduce(const Context& c, const Group& g, Phase phase, const void* in,
                                  void* out, size_t count, DType dt, ReduceOp op, int64_t divisor) {
  if (g.size() == 1) return single_member_allreduce(in, out, count, dt, op, divisor);
  const size_t bytes = count * dtype_size(dt);
  if (in != out) std::memcpy(out, in, bytes);
  PhaseScope trace(c, "recursive_doubling");
  transport::DataPlane& t = c.transport;
  const transport::MessageMeta meta = c.with_phase(phase);
  const Fold f = fold_in(c, g, meta, out, out, count, dt, op);
  if (f.vme < 0) return;  // the neighbour already divided for a mean
  char* tmp = static_cast<char*>(c.workspace.get(2, bytes));
  for (int d = 1; d < f.p; d *= 2) {
    int vpartner = f.vme ^ d;
    int partner = g.global(f.real(vpartner));
    // The first exchange may have gone ahead (Context::ahead; first_send()
    // says what it is: the whole input, to the partner at distance 1).
    const bool take = d == 1 && c.ahead.came, skip = d == 1 && c.ahead.sent;
    transport::Handle r = 0, s = 0;
    if (!take) r = t.post_recv(partner, tmp, bytes, meta);
    if (!skip) s = t.post_send(partner, out, bytes, meta);
    const char* theirs = take ? t.take_ahead(partner, bytes, meta) : tmp;
    if (!take) t.wait(r);
    if (!skip) t.wait(s);
    // The same operand order on both sides makes both results identical.
    if (f.vme < vpartner) {
      reduce(out, out, theirs, count, dt, op);
    } else {
      reduce(out, theirs, out, count, dt, op);
    }
  }
  if (op == ReduceOp::kMean && divisor != 1) divide(out, out, count, dt, divisor);
  fold_out(c, g, meta, f, out, bytes);
}

}  // namespace pytfcomm::algorithms
