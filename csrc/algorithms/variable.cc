// Collectives whose sizes differ per rank (Horovod's allgather and
// alltoall): a ring all-gather in which every block has its own member's
// size, and a pairwise all-to-all. Both only post sends and receives and
// then wait for all of them, so neither depends on the transport buffering
// a message nobody has posted a receive for yet: deadlock-free over TCP and
// shared memory alike.
#include <algorithm>
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"

namespace pytfcomm::algorithms {
namespace {

size_t as_size(uint64_t v) { return static_cast<size_t>(v); }

// Posts `bytes` at `buf` to (send) or from (recv) `peer` in pieces of at
// most `seg` bytes; nothing at all for 0 bytes (both sides know the size).
void post_pieces(transport::DataPlane& t, bool send, int peer, char* buf, size_t bytes, size_t seg,
                 const transport::MessageMeta& meta) {
  for (size_t off = 0; off < bytes; off += seg) {
    const size_t n = std::min(seg, bytes - off);
    if (send) {
      t.post_send(peer, buf + off, n, meta);
    } else {
      t.post_recv(peer, buf + off, n, meta);
    }
  }
}

}  // namespace

void allgatherv(const Context& c, const Group& g, const void* in, void* out, const uint64_t* counts,
                DType dtype) {
  const int n = g.size();
  const size_t es = dtype_size(dtype);
  std::vector<size_t> offset(static_cast<size_t>(n) + 1, 0);
  for (int i = 0; i < n; ++i) {
    offset[static_cast<size_t>(i) + 1] = offset[static_cast<size_t>(i)] + as_size(counts[i]) * es;
  }
  char* base = static_cast<char*>(out);
  const size_t mine = offset[static_cast<size_t>(g.me) + 1] - offset[static_cast<size_t>(g.me)];
  if (mine && base + offset[static_cast<size_t>(g.me)] != in) {
    std::memcpy(base + offset[static_cast<size_t>(g.me)], in, mine);
  }
  if (n == 1) return;
  PhaseScope phase(c, "ring");
  transport::DataPlane& t = c.transport;
  const transport::MessageMeta meta = c.with_phase(Phase::kRing);
  const size_t seg = std::max<size_t>(c.segment_bytes, 1);
  const int next = g.peer(1), prev = g.peer(-1);
  // Step s: forward block (me - s), which arrived in step s - 1 (or is our
  // own), and take in block (me - s - 1); every block travels at its size.
  for (int s = 0; s < n - 1; ++s) {
    const auto send_block = static_cast<size_t>(((g.me - s) % n + n) % n);
    const auto recv_block = static_cast<size_t>(((g.me - s - 1) % n + n) % n);
    post_pieces(t, false, prev, base + offset[recv_block],
                offset[recv_block + 1] - offset[recv_block], seg, meta);
    post_pieces(t, true, next, base + offset[send_block],
                offset[send_block + 1] - offset[send_block], seg, meta);
    t.wait_all();
  }
}

void alltoallv_counts(const Context& c, const Group& g, const uint64_t* send_counts,
                      uint64_t* recv_counts) {
  const int n = g.size();
  recv_counts[g.me] = send_counts[g.me];
  if (n == 1) return;
  PhaseScope phase(c, "counts");
  transport::DataPlane& t = c.transport;
  transport::MessageMeta meta = c.with_phase(Phase::kCounts);
  meta.dtype = static_cast<uint8_t>(DType::kInt64);
  // Eight bytes to and from every peer, all posted at once.
  for (int k = 1; k < n; ++k) {
    const int from = (g.me - k + n) % n;
    t.post_recv(g.global(from), &recv_counts[from], sizeof(uint64_t), meta);
    const int to = (g.me + k) % n;
    t.post_send(g.global(to), &send_counts[to], sizeof(uint64_t), meta);
  }
  t.wait_all();
}

void alltoallv(const Context& c, const Group& g, const void* in, const uint64_t* send_counts,
               void* out, const uint64_t* recv_counts, DType dtype) {
  const int n = g.size();
  const size_t es = dtype_size(dtype);
  std::vector<size_t> soff(static_cast<size_t>(n) + 1, 0), roff(static_cast<size_t>(n) + 1, 0);
  for (int i = 0; i < n; ++i) {
    const auto u = static_cast<size_t>(i);
    soff[u + 1] = soff[u] + as_size(send_counts[i]) * es;
    roff[u + 1] = roff[u] + as_size(recv_counts[i]) * es;
  }
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  const auto me = static_cast<size_t>(g.me);
  if (soff[me + 1] > soff[me])
    std::memmove(dst + roff[me], src + soff[me], soff[me + 1] - soff[me]);
  if (n == 1) return;
  PhaseScope phase(c, "pairwise");
  transport::DataPlane& t = c.transport;
  const transport::MessageMeta meta = c.with_phase(Phase::kPairwise);
  const size_t seg = std::max<size_t>(c.segment_bytes, 1);
  // Step k: to member me + k, from member me - k; one peer in each
  // direction at a time, so no link carries more than one step's data.
  for (int k = 1; k < n; ++k) {
    const auto to = static_cast<size_t>((g.me + k) % n);
    const auto from = static_cast<size_t>((g.me - k + n) % n);
    phase.next("pairwise", g.global(static_cast<int>(to)));
    post_pieces(t, false, g.global(static_cast<int>(from)), dst + roff[from],
                roff[from + 1] - roff[from], seg, meta);
    post_pieces(t, true, g.global(static_cast<int>(to)), const_cast<char*>(src) + soff[to],
                soff[to + 1] - soff[to], seg, meta);
    t.wait_all();
  }
}

}  // namespace pytfcomm::algorithms
