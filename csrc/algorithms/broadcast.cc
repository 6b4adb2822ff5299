// Broadcast: a binomial tree for small buffers (log2 n hops), a pipelined
// chain for large ones (every link busy, segment after segment).
#include <algorithm>
#include <vector>

#include "algorithms/algorithms.h"
#include "common/param.h"

namespace pytfcomm::algorithms {
namespace {

void tree(const Context& c, const Group& g, char* buf, size_t bytes, int root) {
  PhaseScope phase(c, "tree");
  const int n = g.size();
  const int vme = (g.me - root + n) % n;
  auto real = [&](int v) { return g.global((v + root) % n); };
  transport::DataPlane& t = c.transport;
  const transport::MessageMeta meta = c.with_phase(Phase::kTree);
  int mask = 1;
  while (mask < n) {
    if (vme & mask) {
      t.wait(t.post_recv(real(vme - mask), buf, bytes, meta));
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (vme + mask < n) t.post_send(real(vme + mask), buf, bytes, meta);
  }
  t.wait_all();
}

void chain(const Context& c, const Group& g, char* buf, size_t bytes, int root) {
  PhaseScope phase(c, "chain");
  const int n = g.size();
  const int vme = (g.me - root + n) % n;
  transport::DataPlane& t = c.transport;
  const transport::MessageMeta meta = c.with_phase(Phase::kChain);
  const size_t seg = std::max<size_t>(c.segment_bytes, 1);
  const int next = vme + 1 < n ? g.global((vme + 1 + root) % n) : -1;
  const int prev = vme > 0 ? g.global((vme - 1 + root) % n) : -1;
  if (vme == 0) {
    for (size_t off = 0; off < bytes; off += seg) {
      t.post_send(next, buf + off, std::min(seg, bytes - off), meta);
    }
    t.wait_all();
    return;
  }
  std::vector<transport::Handle> recvs;
  for (size_t off = 0; off < bytes; off += seg) {
    recvs.push_back(t.post_recv(prev, buf + off, std::min(seg, bytes - off), meta));
  }
  size_t i = 0;
  for (size_t off = 0; off < bytes; off += seg, ++i) {
    t.wait(recvs[i]);
    if (next >= 0) t.post_send(next, buf + off, std::min(seg, bytes - off), meta);
  }
  t.wait_all();
}

}  // namespace

void broadcast(const Context& c, const Group& g, void* buf, size_t count, DType dtype, int root) {
  if (g.size() == 1) return;
  size_t bytes = count * dtype_size(dtype);
  auto* p = static_cast<char*>(buf);
  if (bytes <= static_cast<size_t>(params().small_bytes) || g.size() == 2) {
    tree(c, g, p, bytes, root);
  } else {
    chain(c, g, p, bytes, root);
  }
}

void barrier(const Context& c, const Group& g) {
  // Dissemination: after round k every member has heard, directly or not,
  // from 2^(k+1) members; ceil(log2 n) rounds of empty messages.
  PhaseScope phase(c, "dissemination");
  const int n = g.size();
  transport::DataPlane& t = c.transport;
  const transport::MessageMeta meta = c.with_phase(Phase::kDissemination);
  for (int d = 1; d < n; d *= 2) {
    auto r = t.post_recv(g.peer(-d), nullptr, 0, meta);
    auto s = t.post_send(g.peer(d), nullptr, 0, meta);
    t.wait(r);
    t.wait(s);
  }
}

}  // namespace pytfcomm::algorithms
