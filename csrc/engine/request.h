// One collective as the engine schedules it (docs/negotiation.md): its key
// (which call it is, the same on every rank whatever order the ranks issue
// their calls in), its descriptor (what it is: compared across ranks before
// any data moves) and its buffers. A synchronous caller owns its Request and
// waits for done(); the engine owns asynchronous ones and deletes them after
// complete(). Either way the engine never touches a request it completed.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>

#include "algorithms/collective.h"
#include "common/clock.h"
#include "common/dtype.h"

namespace pytfcomm {

class ExternalCollective;  // engine/external.h

// Which call a collective is: the n-th (`seq`) collective of a `stream`
// (a hash of the calling thread's name, of a TF op's instance key, or of a
// name the caller gave). Ranks pair up requests with equal keys.
struct CollectiveKey {
  uint64_t stream = 0;
  uint64_t seq = 0;
};
inline bool operator==(const CollectiveKey& a, const CollectiveKey& b) {
  return a.stream == b.stream && a.seq == b.seq;
}
struct CollectiveKeyHash {
  size_t operator()(const CollectiveKey& k) const noexcept {
    return static_cast<size_t>(k.stream * 0x9e3779b97f4a7c15ULL ^ k.seq);
  }
};

// The stream of join requests (Communicator::join): a rank whose join is
// announced takes part, with nothing of its own, in every collective the
// others run until every rank has joined (docs/negotiation.md "Join").
inline constexpr uint64_t kJoinStream = 0x6e696f6a2e637466ULL;  // "ftc.join"

// Set in the streams of name= calls and in no other (stream_id, the TF ops'
// InstanceStream and kJoinStream clear it), so that every rank, a joined one
// too, can tell them apart: a named stream's numbering starts again at 0 once
// a collective of it is decided without a mismatch and nothing else of it is
// in flight (docs/negotiation.md), so its state need not be kept.
inline constexpr uint64_t kNamedStreamBit = 1ULL << 63;
inline bool is_named_stream(uint64_t stream) { return (stream & kNamedStreamBit) != 0; }

// What a collective is; every field must be equal on every rank.
struct Descriptor {
  algorithms::CollectiveKind kind = algorithms::CollectiveKind::kAllreduce;
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  uint8_t algorithm = 0;  // Algorithm the caller asked for (communicator.h)
  int32_t root = 0;
  uint32_t shape_tag = 0;  // digest of the caller's shape (0: not given)
  uint64_t count = 0;      // elements of the input
};
inline bool operator==(const Descriptor& a, const Descriptor& b) {
  return a.kind == b.kind && a.dtype == b.dtype && a.op == b.op && a.algorithm == b.algorithm &&
         a.root == b.root && a.shape_tag == b.shape_tag && a.count == b.count;
}

// Kinds whose element count is each rank's own (allgatherv: what it
// contributes, alltoallv: what it sends in all); their shape_tag digests
// the shape of one row, which must agree.
inline bool count_per_rank(algorithms::CollectiveKind k) {
  return k == algorithms::CollectiveKind::kAllgatherv ||
         k == algorithms::CollectiveKind::kAlltoallv;
}

// Whether two ranks' descriptors describe one collective: equal, but for
// the count of a per-rank-count kind.
inline bool same_collective(const Descriptor& a, const Descriptor& b) {
  if (!count_per_rank(a.kind)) return a == b;
  Descriptor c = b;
  c.count = a.count;
  return a == c;
}

class Request {
 public:
  CollectiveKey key;
  Descriptor desc;
  std::string label;  // "allreduce #3 of thread 'MainThread'", for messages
  const void* in = nullptr;
  void* out = nullptr;
  // Set: another backend moves the data (engine/external.h); `in` and `out`
  // are then unused and nothing of the data travels in the rounds.
  ExternalCollective* external = nullptr;
  // Per-rank-count kinds (count_per_rank()): `out` is unused; once every
  // rank's count is known the engine calls alloc_out(total elements) on its
  // thread for where the result goes (null: nowhere; this rank still takes
  // part, through scratch, and its caller reports why). recv_counts
  // (size() entries) receives the count of each rank: its contribution
  // (allgatherv) or what it sent this rank (alltoallv). send_counts
  // (alltoallv, size() entries, summing to desc.count): what goes to each.
  std::function<void*(uint64_t)> alloc_out;
  uint64_t* recv_counts = nullptr;
  const uint64_t* send_counts = nullptr;
  int* last_joined = nullptr;  // a join: where the rank that joined last goes
  double timeout_s = 0;        // resolved (> 0)
  TimePoint deadline = TimePoint::max();
  TimePoint submitted{};  // when the caller asked (the stall warning's start)
  int64_t submit_ns = 0;  // for the timeline
  // Called once with the outcome (null: success), on the thread that drives
  // the engine, before complete() returns. Must not throw or block.
  std::function<void(std::exception_ptr)> on_done;
  // Decided with every rank agreeing on what it is (the engine's, under its
  // driver role; read by the caller once done()).
  bool agreed = false;

  bool done() const { return done_.load(std::memory_order_acquire); }
  std::exception_ptr error() const { return error_; }

  // The engine's side: records the outcome, calls on_done, then marks the
  // request done (after which a synchronous owner may destroy it).
  void complete(std::exception_ptr error) noexcept {
    error_ = error;
    if (on_done) on_done(error);
    done_.store(true, std::memory_order_release);
  }

  size_t bytes() const { return static_cast<size_t>(desc.count) * dtype_size(desc.dtype); }

 private:
  std::exception_ptr error_;
  std::atomic<bool> done_{false};
};

}  // namespace pytfcomm
