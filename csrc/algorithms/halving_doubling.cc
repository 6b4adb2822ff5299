// Halving-doubling all-reduce (Rabenseifner): a reduce-scatter by recursive
// halving, then an all-gather by recursive doubling. Each rank moves the same
// bytes as in the ring, 2(p-1)/p of the buffer, but in 2 log2(p) pairwise
// exchanges instead of 2(p-1) steps around a ring: fewer hand-offs, none of
// them waiting on a chain of other ranks. With n not a power of two, the
// first 2(n-p) members fold in pairs first (fold.h).
//
// Each exchange is pipelined segment by segment and its sends paced, like the
// ring's (ring.cc): a peer's kernel receive queue never holds more than the
// pacing window of unread bytes from us.
#include <algorithm>
#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/fold.h"
#include "algorithms/pacing.h"
#include "common/reduce.h"

namespace pytfcomm::algorithms {
namespace {

struct Span {
  size_t begin;  // element offset
  size_t count;
};

// What a reduce-scatter exchange does with each segment it receives: combine
// it with this rank's own values of the same elements, the lower member's
// operand first, dividing on the last step of a mean.
struct Combine {
  ReduceOp op;
  bool partner_lower;
  bool divide;
  int64_t divisor;
};

// One pairwise exchange with `partner`: `send` of `src` goes out while `recv`
// comes in, segment by segment, sends paced like the ring's. Without
// `combine` (all-gather) the segments land in `out` at their place; with it
// out[recv] = combine(partner's, src[recv]), each segment received into its
// place in `out` when `src` is another buffer (the reduction then finds it in
// cache, as in ring.cc), else into a slot.
// With `ahead` (the first exchange, Context::ahead): this rank's half
// already went (ahead->sent) and/or the partner's is here in full
// (ahead->came: taken from the transport, combined with no receive).
void exchange(const Context& c, const transport::MessageMeta& meta, int partner, const char* src,
              Span send, char* out, Span recv, DType dt, const Combine* combine,
              const Ahead* first = nullptr) {
  transport::DataPlane& t = c.transport;
  const size_t es = dtype_size(dt);
  const size_t seg = std::max<size_t>(1, c.segment_bytes / es);
  const size_t nsend = first && first->sent ? 0 : (send.count + seg - 1) / seg;
  const size_t nrecv = (recv.count + seg - 1) / seg;
  const size_t ahead = std::max<size_t>(kSlots, kSendAheadBytes / (seg * es));
  const char* arrived =
      first && first->came ? t.take_ahead(partner, recv.count * es, meta) : nullptr;
  const bool in_slots = combine && src == out && !arrived;
  char* slots = in_slots ? static_cast<char*>(c.workspace.get(3, kSlots * seg * es)) : nullptr;
  size_t sent = 0, posted = 0;
  std::vector<transport::Handle> sends;
  sends.reserve(nsend);
  auto pump = [&](size_t limit) {
    for (; sent < nsend && sent < limit; ++sent) {
      size_t off = sent * seg, k = std::min(seg, send.count - off);
      sends.push_back(t.post_send(partner, src + (send.begin + off) * es, k * es, meta));
    }
  };
  std::vector<transport::Handle> recvs(nrecv);
  // Where segment u arrives: a slot when combining in place, else its place in `out`.
  auto landing = [&](size_t u) {
    return in_slots ? slots + (u % kSlots) * seg * es : out + (recv.begin + u * seg) * es;
  };
  auto post = [&](size_t u) {
    size_t k = std::min(seg, recv.count - u * seg);
    recvs[u] = t.post_recv(partner, landing(u), k * es, meta);
  };
  for (size_t u = 0; u < nrecv; ++u) {
    if (!arrived) {
      for (; posted < nrecv && posted < u + kSlots; ++posted) post(posted);
    }
    pump(u + ahead);
    if (!arrived) t.wait(recvs[u]);
    if (!combine) continue;
    const size_t at = (recv.begin + u * seg) * es;
    const size_t k = std::min(seg, recv.count - u * seg);
    const char* theirs = arrived ? arrived + u * seg * es : landing(u);
    const char* a = combine->partner_lower ? theirs : src + at;
    const char* b = combine->partner_lower ? src + at : theirs;
    if (combine->divide && combine->op == ReduceOp::kMean) {
      reduce_divide(out + at, a, b, k, dt, combine->divisor);
    } else {
      reduce(out + at, a, b, k, dt, combine->op);
    }
  }
  pump(SIZE_MAX);
  for (transport::Handle h : sends) t.wait(h);
}

}  // namespace

void halving_doubling_allreduce(const Context& c, const Group& g, Phase phase, const void* in_v,
                                void* out_v, size_t count, DType dt, ReduceOp op, int64_t divisor) {
  const char* in = static_cast<const char*>(in_v);
  char* out = static_cast<char*>(out_v);
  if (g.size() == 1) return single_member_allreduce(in, out, count, dt, op, divisor);
  PhaseScope trace(c, "reduce_scatter");
  const transport::MessageMeta meta = c.with_phase(phase);
  const Fold f = fold_in(c, g, meta, in, out, count, dt, op);
  if (f.vme < 0) return;  // the partner divided for a mean
  auto real = [&](int v) { return g.global(f.real(v)); };

  // Reduce-scatter: at distance d the pair splits what both hold; the lower
  // member keeps the lower half. `in` is read until the first step wrote out.
  Span mine{0, count};
  const char* cur = f.holds_pair ? out : in;
  struct Step {
    Span held;  // what both members held before the step
    Span gave;  // the half this rank gave its partner: what the all-gather brings back
  };
  std::vector<Step> steps;
  for (int d = 1; d < f.p; d *= 2) {
    const int vpartner = f.vme ^ d;
    const bool lower = f.vme < vpartner;
    const size_t half = mine.count / 2;
    const Span low{mine.begin, half}, high{mine.begin + half, mine.count - half};
    const Span keep = lower ? low : high, give = lower ? high : low;
    steps.push_back({mine, give});
    const Combine combine{op, !lower, d * 2 == f.p, divisor};
    // The first exchange may have gone ahead (first_send() says what it is).
    exchange(c, meta, real(vpartner), cur, give, out, keep, dt, &combine,
             d == 1 ? &c.ahead : nullptr);
    cur = out;
    mine = keep;
  }
  // All-gather: undo the halving, largest distance first; each step brings
  // back the half given away at the same distance.
  trace.next("all_gather");
  for (int i = static_cast<int>(steps.size()) - 1; i >= 0; --i) {
    const Step& s = steps[static_cast<size_t>(i)];
    exchange(c, meta, real(f.vme ^ (1 << i)), out, mine, out, s.gave, dt, nullptr);
    mine = s.held;
  }
  fold_out(c, g, meta, f, out, count * dtype_size(dt));
}

}  // namespace pytfcomm::algorithms
