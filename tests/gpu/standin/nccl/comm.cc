#include "nccl/comm.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>

#include "nccl/last_error.h"

// ncclComm_t points at one of these; only its address matters.
struct ncclComm {
  uint64_t serial;
};

namespace ptcsi_nccl {
namespace {

constexpr int64_t kBusyNs = 5'000'000;  // PTCSI_NCCL_INPROGRESS: 5 ms

std::mutex g_mu;
std::map<ncclComm_t, std::shared_ptr<Comm>>& registry() {
  static auto* m = new std::map<ncclComm_t, std::shared_ptr<Comm>>();
  return *m;
}

std::string poison_text(Header* h) {
  // The writer publishes 2 once the message is written (a few instructions).
  for (int i = 0; i < 1000 && h->poison.load(std::memory_order_acquire) != 2; ++i) {
    std::this_thread::yield();
  }
  return std::string(h->poison_msg, strnlen(h->poison_msg, sizeof(h->poison_msg)));
}

}  // namespace

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Comm::set_error(ncclResult_t r, const std::string& text) {
  std::lock_guard<std::mutex> lock(mu_);
  int expected = ncclSuccess;
  if (error.compare_exchange_strong(expected, r)) error_text_ = text;
}

std::string Comm::error_text() {
  std::lock_guard<std::mutex> lock(mu_);
  return error_text_;
}

void Comm::mark_busy() {
  if (knobs.in_progress && !blocking) busy_until.store(now_ns() + kBusyNs);
}

ncclResult_t Comm::state() {
  // Revoked: in progress until every queued work item was released.
  if (revoked.load()) return pending.load() > 0 ? ncclInProgress : ncclSuccess;
  if (stuck.load()) return ncclInProgress;
  auto e = static_cast<ncclResult_t>(error.load());
  if (e == ncclSuccess && !ready.load()) {
    Header* h = seg->header();
    if (h->poison.load(std::memory_order_acquire) != 0) {
      set_error(ncclInvalidUsage, "NCCL stand-in: communicator init failed: " + poison_text(h));
      e = static_cast<ncclResult_t>(error.load());
    } else if (knobs.never_join == rank || h->joined.load(std::memory_order_acquire) < nranks) {
      return ncclInProgress;
    } else {
      ready.store(true);
    }
  }
  if (e != ncclSuccess) {
    set_last_error(error_text());
    return e;
  }
  if (now_ns() < busy_until.load()) return ncclInProgress;
  if (finalizing.load() && pending.load() > 0) return ncclInProgress;
  return ncclSuccess;
}

ncclResult_t join(Comm& c, const ncclUniqueId& id, const std::string& poison) {
  c.id = id;
  c.name = segment_name(&id, sizeof(id));
  size_t slot = c.knobs.slot_bytes != 0 ? c.knobs.slot_bytes : kDefaultSlotBytes;
  // A reduce-scatter step needs room for at least one 8-byte element per rank.
  slot = std::max(slot, (static_cast<size_t>(c.nranks) * 8 + 63) / 64 * 64);
  std::string err;
  int seen = 0;
  Segment* s = Segment::open(c.name, c.nranks, slot, &c.stop, &err, &seen);
  if (s == nullptr) return fail(ncclSystemError, "NCCL stand-in: joining " + c.name + ": " + err);
  c.seg.reset(s);
  const std::string who = "rank " + std::to_string(c.rank) + " of " + c.name;
  if (seen != c.nranks) {
    std::string msg = "nranks disagree: " + who + " says " + std::to_string(c.nranks) +
                      ", the communicator was created for " + std::to_string(seen);
    s->poison(msg);
    return fail(ncclInvalidUsage, "NCCL stand-in: " + msg);
  }
  if (c.rank < 0 || c.rank >= c.nranks) {
    std::string msg = "rank " + std::to_string(c.rank) + " is out of range for " +
                      std::to_string(c.nranks) + " ranks (" + c.name + ")";
    s->poison(msg);
    return fail(ncclInvalidUsage, "NCCL stand-in: " + msg);
  }
  if (!poison.empty()) {
    s->poison(poison);
    return fail(ncclInternalError, "NCCL stand-in: " + poison);
  }
  if (s->header()->taken[c.rank].exchange(1) != 0) {
    std::string msg = who + " was claimed twice";
    s->poison(msg);
    return fail(ncclInvalidUsage, "NCCL stand-in: " + msg);
  }
  if (c.knobs.never_join == c.rank) return ncclSuccess;               // PTCSI_NCCL_NEVER_JOIN
  if (s->header()->joined.fetch_add(1) + 1 == c.nranks) s->unlink();  // all in: drop the name
  return ncclSuccess;
}

ncclComm_t register_comm(std::shared_ptr<Comm> c) {
  static std::atomic<uint64_t> serial{0};
  auto* h = new ncclComm{++serial};  // never freed: see comm.h
  std::lock_guard<std::mutex> lock(g_mu);
  registry()[h] = std::move(c);
  return h;
}

std::shared_ptr<Comm> find_comm(ncclComm_t h) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = registry().find(h);
  return it == registry().end() ? nullptr : it->second;
}

std::shared_ptr<Comm> unregister_comm(ncclComm_t h) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = registry().find(h);
  if (it == registry().end()) return nullptr;
  std::shared_ptr<Comm> c = std::move(it->second);
  registry().erase(it);
  return c;
}

}  // namespace ptcsi_nccl
