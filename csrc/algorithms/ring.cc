// Ring reduce-scatter and all-gather, pipelined segment by segment: the
// segment reduced (or received) at step s is sent on at step s+1 at once, so
// reducing one segment overlaps moving the next, and phases flow into each
// other without a global barrier.
#include <cstdint>
#include <cstring>
#include <deque>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/pacing.h"
#include "common/error.h"
#include "common/reduce.h"

namespace pytfcomm::algorithms {
namespace {

constexpr transport::Handle kNoHandle = ~transport::Handle{0};

struct Unit {
  int step;
  size_t begin;  // element offset in the buffer
  size_t count;
};

int wrap(int i, int n) { return ((i % n) + n) % n; }

// Schedule (member me of n, chunk k = balanced part k):
//   reduce-scatter step s < n-1: send chunk me-s-1, receive chunk me-s-2
//   all-gather step t:           send chunk me-t,   receive chunk me-t-1
// so that after reduce-scatter member me owns chunk me, and what arrives at
// one step is exactly what leaves at the next.
void run_ring(const Context& c, const Group& g, Phase phase, const char* in, char* out,
              size_t count, DType dt, ReduceOp op, int64_t divisor, bool do_rs, bool do_ag) {
  const int n = g.size();
  const int me = g.me;
  const size_t es = dtype_size(dt);
  const size_t seg_elems = std::max<size_t>(1, c.segment_bytes / es);
  const int rs_steps = do_rs ? n - 1 : 0;
  const int steps = rs_steps + (do_ag ? n - 1 : 0);
  auto recv_chunk = [&](int s) {
    return s < rs_steps ? wrap(me - s - 2, n) : wrap(me - (s - rs_steps) - 1, n);
  };
  transport::DataPlane& t = c.transport;
  const transport::MessageMeta meta = c.with_phase(phase);
  const int right = g.peer(1);
  const int left = g.peer(-1);

  std::vector<Unit> units;
  for (int s = 0; s < steps; ++s) {
    Range ch = split(count, n, recv_chunk(s));
    for (size_t off = 0; off < ch.count; off += seg_elems) {
      units.push_back({s, ch.begin + off, std::min(seg_elems, ch.count - off)});
    }
  }
  // Out of place, a reduce-scatter piece is received straight into its place
  // in `out` and reduced there (out = piece op in): the copy that brings it
  // in writes those lines once, and the reduction then finds them in cache,
  // where a separate slot made it write `out` a second time (2-core VM, 8 MiB
  // halves: ~20% less time per piece). In place, `out` is the input, so the
  // piece waits in a slot.
  const bool into_out = do_rs && in != out;
  char* slots = do_rs && !into_out ? static_cast<char*>(c.workspace.get(0, kSlots * seg_elems * es))
                                   : nullptr;

  // Sends in the order the right neighbour receives them: step 0's segments,
  // then each unit forwarded as it is ready; posted at most `ahead` segments
  // beyond the unit being received (kSendAheadBytes).
  struct Send {
    const char* data;
    size_t bytes;
    int rs_step;  // the reduce-scatter step it belongs to (-1: all-gather)
  };
  std::deque<Send> ready;
  size_t sends_queued = 0, sends_posted = 0;
  const size_t ahead = std::max<size_t>(kSlots, kSendAheadBytes / (seg_elems * es));
  // Last send of each reduce-scatter step, by queue index and handle: an
  // all-gather receive into the same chunk must wait for it (the send may
  // still be reading that memory).
  const size_t nrs = static_cast<size_t>(std::max(rs_steps, 1));
  std::vector<size_t> rs_last_index(nrs, SIZE_MAX);
  std::vector<transport::Handle> rs_last_send(nrs, kNoHandle);
  auto queue_send = [&](const char* data, size_t bytes, int step) {
    int rs_step = step < rs_steps ? step : -1;
    if (rs_step >= 0) rs_last_index[static_cast<size_t>(rs_step)] = sends_queued;
    ready.push_back({data, bytes, rs_step});
    ++sends_queued;
  };
  auto pump = [&](size_t limit) {
    while (!ready.empty() && sends_posted < limit) {
      const Send& s = ready.front();
      auto h = t.post_send(right, s.data, s.bytes, meta);
      if (s.rs_step >= 0) rs_last_send[static_cast<size_t>(s.rs_step)] = h;
      ready.pop_front();
      ++sends_posted;
    }
  };

  // Step 0: my own contribution to chunk me-1 (reduce-scatter), or my chunk
  // (all-gather only).
  {
    Range ch = split(count, n, do_rs ? wrap(me - 1, n) : me);
    const char* src = do_rs ? in : out;
    for (size_t off = 0; off < ch.count; off += seg_elems) {
      size_t k = std::min(seg_elems, ch.count - off);
      queue_send(src + (ch.begin + off) * es, k * es, 0);
    }
  }
  pump(ahead);

  // Timeline phases: reduce-scatter until the first all-gather unit.
  size_t first_ag = c.tracer && do_rs && do_ag ? 0 : units.size();
  while (first_ag < units.size() && units[first_ag].step < rs_steps) ++first_ag;
  PhaseScope trace(c, do_rs ? "reduce_scatter" : "all_gather", right);

  std::vector<transport::Handle> recv_handle(units.size(), kNoHandle);
  size_t posted = 0;
  auto hazard_clear = [&](size_t u, bool block) {
    int s = units[u].step;
    if (s < rs_steps || !do_rs) return true;
    const size_t k = static_cast<size_t>(s - rs_steps);
    if (rs_last_index[k] == SIZE_MAX) return true;  // that step sent nothing
    if (rs_last_index[k] >= sends_posted) {
      if (!block) return false;
      pump(rs_last_index[k] + 1);  // queued already: post it to wait on it
    }
    transport::Handle h = rs_last_send[k];
    if (block) {
      t.wait(h);
      return true;
    }
    return t.test(h);
  };
  // Where unit u's data arrives: a slot for an in-place reduce-scatter
  // piece, else its place in `out`.
  auto landing = [&](size_t u) {
    const Unit& x = units[u];
    return x.step < rs_steps && !into_out ? slots + (u % kSlots) * seg_elems * es
                                          : out + x.begin * es;
  };
  auto post = [&](size_t u) {
    recv_handle[u] = t.post_recv(left, landing(u), units[u].count * es, meta);
    ++posted;
  };

  for (size_t u = 0; u < units.size(); ++u) {
    if (u == first_ag) trace.next("all_gather", right);
    pump(u + ahead);
    while (posted < units.size() && posted < u + kSlots && hazard_clear(posted, false)) {
      post(posted);
    }
    if (posted == u) {
      hazard_clear(u, true);
      post(u);
    }
    t.wait(recv_handle[u]);
    const Unit& x = units[u];
    char* dst = out + x.begin * es;
    if (x.step < rs_steps) {
      const char* piece = landing(u);
      const char* mine = in + x.begin * es;
      if (x.step == rs_steps - 1 && op == ReduceOp::kMean) {
        reduce_divide(dst, piece, mine, x.count, dt, divisor);
      } else {
        reduce(dst, piece, mine, x.count, dt, op);
      }
    }
    if (x.step + 1 < steps) queue_send(dst, x.count * es, x.step + 1);
  }
  pump(SIZE_MAX);
  t.wait_all();
}

}  // namespace

void single_member_allreduce(const void* in, void* out, size_t count, DType dt, ReduceOp op,
                             int64_t divisor) {
  if (in != out) std::memcpy(out, in, count * dtype_size(dt));
  if (op == ReduceOp::kMean && divisor != 1) divide(out, out, count, dt, divisor);
}

void ring_allreduce(const Context& c, const Group& g, Phase phase, const void* in, void* out,
                    size_t count, DType dtype, ReduceOp op, int64_t divisor) {
  if (g.size() == 1) return single_member_allreduce(in, out, count, dtype, op, divisor);
  run_ring(c, g, phase, static_cast<const char*>(in), static_cast<char*>(out), count, dtype, op,
           divisor, true, true);
}

void ring_reduce_scatter_inplace(const Context& c, const Group& g, Phase phase, const void* in,
                                 void* out, size_t count, DType dtype, ReduceOp op,
                                 int64_t divisor) {
  if (g.size() == 1) return single_member_allreduce(in, out, count, dtype, op, divisor);
  run_ring(c, g, phase, static_cast<const char*>(in), static_cast<char*>(out), count, dtype, op,
           divisor, true, false);
}

void ring_allgather_inplace(const Context& c, const Group& g, Phase phase, void* buf, size_t count,
                            DType dtype) {
  if (g.size() == 1) return;
  run_ring(c, g, phase, nullptr, static_cast<char*>(buf), count, dtype, ReduceOp::kSum, 1, false,
           true);
}

void reduce_scatter(const Context& c, const Group& g, const void* in, void* out, size_t count,
                    DType dtype, ReduceOp op, int64_t divisor) {
  const int n = g.size();
  PTC_CHECK_ARG(count % static_cast<size_t>(n) == 0,
                "reduce_scatter needs an element count "
                "divisible by the number of ranks (",
                n, "), got ", count);
  const size_t es = dtype_size(dtype);
  Range mine = split(count, n, g.me);
  if (n == 1) return single_member_allreduce(in, out, count, dtype, op, divisor);
  char* full = static_cast<char*>(c.workspace.get(1, count * es));
  run_ring(c, g, Phase::kRing, static_cast<const char*>(in), full, count, dtype, op, divisor, true,
           false);
  std::memcpy(out, full + mine.begin * es, mine.count * es);
}

void allgather(const Context& c, const Group& g, const void* in, void* out, size_t count,
               DType dtype) {
  const int n = g.size();
  const size_t es = dtype_size(dtype);
  char* dst = static_cast<char*>(out) + static_cast<size_t>(g.me) * count * es;
  if (dst != in) std::memcpy(dst, in, count * es);
  if (n == 1) return;
  run_ring(c, g, Phase::kRing, nullptr, static_cast<char*>(out), count * static_cast<size_t>(n),
           dtype, ReduceOp::kSum, 1, false, true);
}

}  // namespace pytfcomm::algorithms
