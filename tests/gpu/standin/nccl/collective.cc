#include "nccl/collective.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "nccl/reduce.h"

namespace ptcsi_nccl {
namespace {

// Waits until every rank reached barrier step s; false when the comm was
// aborted or destroyed meanwhile.
bool barrier(Comm& c, uint64_t s) {
  Segment& seg = *c.seg;
  seg.ctl(c.rank)->arrived.store(s, std::memory_order_release);
  const int64_t start = now_ns();
  for (int r = 0; r < c.nranks; ++r) {
    while (seg.ctl(r)->arrived.load(std::memory_order_acquire) < s) {
      if (c.stop.load()) return false;
      const int64_t waited = now_ns() - start;
      if (waited < 50'000) {
        std::this_thread::yield();
      } else if (waited < 2'000'000) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(500));
      }
    }
  }
  return true;
}

std::string describe(const Desc& d) {
  std::string s = std::string(kind_name(static_cast<Kind>(d.kind))) +
                  " count=" + std::to_string(d.count) + " " +
                  type_name(static_cast<ncclDataType_t>(d.dtype));
  if (d.op >= 0) s += std::string(" op=") + op_name(static_cast<ncclRedOp_t>(d.op));
  if (d.root >= 0) s += " root=" + std::to_string(d.root);
  return s;
}

// "" when every rank posted the same descriptor as `mine`, else the message.
std::string compare(Comm& c, const Desc& mine, uint64_t parity) {
  std::vector<Desc> all(static_cast<size_t>(c.nranks));
  std::string differs;
  auto note = [&](const char* what) {
    if (differs.find(what) == std::string::npos)
      differs += std::string(differs.empty() ? "" : ", ") + what;
  };
  for (int r = 0; r < c.nranks; ++r) {
    const Desc& d = c.seg->ctl(r)->desc[parity];
    all[static_cast<size_t>(r)] = d;
    if (d.kind != mine.kind) note("kind");
    if (d.count != mine.count) note("count");
    if (d.dtype != mine.dtype) note("datatype");
    if (d.op != mine.op) note("op");
    if (d.root != mine.root) note("root");
    if (d.seq != mine.seq) note("sequence number");
  }
  if (differs.empty()) return "";
  std::string msg = "NCCL stand-in: mismatched collective #" + std::to_string(mine.seq) + " on " +
                    c.name + " (seen by rank " + std::to_string(c.rank) + "): ranks differ in " +
                    differs + ":";
  for (int r = 0; r < c.nranks; ++r) {
    msg += " rank " + std::to_string(r) + ": " + describe(all[static_cast<size_t>(r)]) +
           (r + 1 < c.nranks ? ";" : "");
  }
  return msg;
}

CUresult run(Work& w) {
  Comm& c = *w.comm;
  std::lock_guard<std::mutex> lock(c.exec_mu);
  if (c.stop.load() || c.error.load() != ncclSuccess) return kWorkFailed;
  if (c.knobs.hang_here(c.rank, w.call)) {
    // PTCSI_NCCL_HANG_AT: a stopped rank; it never reaches the barrier.
    while (!c.stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return kWorkFailed;
  }
  if (c.knobs.error_here(c.rank, w.call)) {
    c.set_error(ncclSystemError, "NCCL stand-in: injected failure (PTCSI_NCCL_ASYNC_ERROR_AT) in " +
                                     std::string(kind_name(w.kind)) + " #" +
                                     std::to_string(w.call) + " on rank " + std::to_string(c.rank) +
                                     " of " + c.name);
    return kWorkFailed;
  }
  Segment& seg = *c.seg;
  const bool reduces = w.kind == Kind::kAllReduce || w.kind == Kind::kReduceScatter;
  Desc mine{++c.seq,
            static_cast<int32_t>(w.kind),
            static_cast<int32_t>(w.type),
            reduces ? static_cast<int32_t>(w.op) : -1,
            w.kind == Kind::kBroadcast ? w.root : -1,
            w.count};
  uint64_t s = ++c.step;
  seg.ctl(c.rank)->desc[s & 1] = mine;
  if (!barrier(c, s)) return kWorkFailed;
  std::string bad = compare(c, mine, s & 1);
  if (!bad.empty()) {
    std::fprintf(stderr, "%s\n", bad.c_str());
    c.set_error(ncclInvalidUsage, bad);
    return kWorkFailed;
  }

  const int n = c.nranks;
  const size_t esz = type_size(w.type);
  const size_t per = w.kind == Kind::kReduceScatter
                         ? seg.slot_bytes() / (static_cast<size_t>(n) * esz)
                         : seg.slot_bytes() / esz;
  const auto* send = static_cast<const char*>(w.send);
  auto* recv = static_cast<char*>(w.recv);
  std::vector<const void*> in(static_cast<size_t>(n));
  for (size_t off = 0; off < w.count; off += per) {
    const size_t len = std::min(per, w.count - off);
    const size_t bytes = len * esz;
    s = ++c.step;
    char* slot = seg.slot(c.rank, s);
    switch (w.kind) {
      case Kind::kAllReduce:
      case Kind::kAllGather:
        std::memcpy(slot, send + off * esz, bytes);
        break;
      case Kind::kBroadcast:
        if (c.rank == w.root) std::memcpy(slot, send + off * esz, bytes);
        break;
      case Kind::kReduceScatter:
        for (int d = 0; d < n; ++d) {
          std::memcpy(slot + static_cast<size_t>(d) * per * esz,
                      send + (static_cast<size_t>(d) * w.count + off) * esz, bytes);
        }
        break;
    }
    if (!barrier(c, s)) return kWorkFailed;
    switch (w.kind) {
      case Kind::kAllReduce:
        for (int r = 0; r < n; ++r) in[static_cast<size_t>(r)] = seg.slot(r, s);
        reduce(w.type, w.op, recv + off * esz, in.data(), n, len);
        break;
      case Kind::kReduceScatter:
        for (int r = 0; r < n; ++r) {
          in[static_cast<size_t>(r)] = seg.slot(r, s) + static_cast<size_t>(c.rank) * per * esz;
        }
        reduce(w.type, w.op, recv + off * esz, in.data(), n, len);
        break;
      case Kind::kAllGather:
        for (int r = 0; r < n; ++r) {
          std::memcpy(recv + (static_cast<size_t>(r) * w.count + off) * esz, seg.slot(r, s), bytes);
        }
        break;
      case Kind::kBroadcast:
        std::memcpy(recv + off * esz, seg.slot(w.root, s), bytes);
        break;
    }
  }
  return CUDA_SUCCESS;
}

}  // namespace

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kAllReduce:
      return "AllReduce";
    case Kind::kReduceScatter:
      return "ReduceScatter";
    case Kind::kAllGather:
      return "AllGather";
    case Kind::kBroadcast:
      return "Broadcast";
  }
  return "unknown-collective";
}

CUresult run_work(void* work) { return run(*static_cast<Work*>(work)); }

void release_work(void* work) {
  auto* w = static_cast<Work*>(work);
  std::shared_ptr<Comm> c = std::move(w->comm);
  delete w;
  c->pending.fetch_sub(1);
}

}  // namespace ptcsi_nccl
