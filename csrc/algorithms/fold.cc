// Folding the members beyond a power of two in pairs (fold.h).
#include "algorithms/fold.h"

#include "common/reduce.h"

namespace pytfcomm::algorithms {

Fold fold_in(const Context& c, const Group& g, const transport::MessageMeta& meta, const void* data,
             void* out, size_t count, DType dt, ReduceOp op) {
  Fold f;
  const int n = g.size(), me = g.me;
  while (f.p * 2 <= n) f.p *= 2;
  f.rem = n - f.p;
  if (me >= 2 * f.rem) {
    f.vme = me - f.rem;
    return f;
  }
  transport::DataPlane& t = c.transport;
  const size_t bytes = count * dtype_size(dt);
  if (me % 2 == 0) {  // the partner divides for a mean
    t.wait(t.post_send(g.global(me + 1), data, bytes, meta));
    t.wait(t.post_recv(g.global(me + 1), out, bytes, meta));
    return f;
  }
  void* tmp = c.workspace.get(2, bytes);
  t.wait(t.post_recv(g.global(me - 1), tmp, bytes, meta));
  reduce(out, tmp, data, count, dt, op);  // lower member's data first
  f.vme = me / 2;
  f.holds_pair = true;
  return f;
}

void fold_out(const Context& c, const Group& g, const transport::MessageMeta& meta, const Fold& f,
              const void* out, size_t bytes) {
  if (f.holds_pair) c.transport.wait(c.transport.post_send(g.global(g.me - 1), out, bytes, meta));
}

}  // namespace pytfcomm::algorithms
