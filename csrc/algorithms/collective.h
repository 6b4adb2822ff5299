// What every algorithm receives: the data plane, the group of ranks taking
// part, the message metadata of this collective, and reusable scratch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/collective_kind.h"
#include "common/dtype.h"
#include "transport/data_plane.h"

namespace pytfcomm::algorithms {

// The collective kinds' table lives in common/ with the other code tables;
// algorithm code names them here as before.
using pytfcomm::CollectiveKind;
using pytfcomm::kind_name;
static_assert(static_cast<uint8_t>(CollectiveKind::kNegotiate) == transport::kNegotiationKind,
              "one wire value for negotiation frames");

// Wire values (MessageMeta::phase): which algorithm, and which part of a
// composed one, a message belongs to. Ranks that picked different
// algorithms therefore fail with a mismatch instead of exchanging garbage.
enum class Phase : uint8_t {
  kRing = 1,
  kRecursiveDoubling = 2,
  kLocalReduceScatter = 3,
  kCrossRing = 4,
  kCrossRecursiveDoubling = 5,
  kLocalAllgather = 6,
  kTree = 7,
  kChain = 8,
  kDissemination = 9,
  kOneShot = 10,
  kPairwise = 11,  // alltoallv's data
  kCounts = 12,    // alltoallv's counts
  kHalvingDoubling = 13,
};

// An ordered subset of the communicator's ranks; algorithms address peers
// by their index in the group.
struct Group {
  std::vector<int> ranks;  // global ranks, in group order
  int me = 0;              // this rank's index in `ranks`
  int size() const { return static_cast<int>(ranks.size()); }
  // Global rank of the member `offset` places after this one (wraps).
  int peer(int offset) const {
    int n = size();
    return ranks[static_cast<size_t>(((me + offset) % n + n) % n)];
  }
  int global(int index) const { return ranks[static_cast<size_t>(index)]; }
};

// Scratch memory reused across collectives (64-byte aligned, grows only).
class Workspace {
 public:
  void* get(int slot, size_t bytes);

 private:
  struct Block {
    std::unique_ptr<char[], void (*)(char*)> data{nullptr, nullptr};
    size_t bytes = 0;
  };
  std::vector<Block> blocks_;
};

// Receives the phases of a collective (the engine's timeline); algorithms
// mark them with PhaseScope and never see whether anyone listens.
class Tracer {
 public:
  virtual ~Tracer() = default;
  virtual void phase_begin(const char* name, int peer) = 0;
  virtual void phase_end() = 0;
};

// A pairwise all-reduce's first message (first_send()) that went ahead of
// the data phase, right behind a negotiation record (docs/negotiation.md):
// `sent`, this member's, so it is not sent again; `came`, its first
// partner's, taken with DataPlane::take_ahead() instead of a receive.
struct Ahead {
  bool sent = false;
  bool came = false;
};

struct Context {
  transport::DataPlane& transport;  // the data movement only (transport/data_plane.h)
  transport::MessageMeta meta;      // seq/kind/dtype/op/root/count of this collective
  Workspace& workspace;
  size_t segment_bytes;      // pipeline granularity
  Tracer* tracer = nullptr;  // null unless PYTFCOMM_TIMELINE is set
  Ahead ahead{};             // only recursive and halving-doubling all-reduces read it

  transport::MessageMeta with_phase(Phase p) const {
    transport::MessageMeta m = meta;
    m.phase = static_cast<uint8_t>(p);
    return m;
  }
};

// Marks a phase (name: a string literal) for the timeline until it goes out
// of scope or next() starts the following one. One branch when tracing is off.
class PhaseScope {
 public:
  PhaseScope(const Context& c, const char* name, int peer = -1) : t_(c.tracer) {
    if (t_) t_->phase_begin(name, peer);
  }
  ~PhaseScope() {
    if (t_) t_->phase_end();
  }
  void next(const char* name, int peer = -1) {
    if (t_) {
      t_->phase_end();
      t_->phase_begin(name, peer);
    }
  }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  Tracer* t_;
};

// Balanced split of `count` elements into `parts`: the first count % parts
// parts get one element more.
struct Range {
  size_t begin = 0;
  size_t count = 0;
};
inline Range split(size_t count, int parts, int index) {
  size_t base = count / static_cast<size_t>(parts);
  size_t extra = count % static_cast<size_t>(parts);
  size_t i = static_cast<size_t>(index);
  return {i * base + std::min(i, extra), base + (i < extra ? 1 : 0)};
}

}  // namespace pytfcomm::algorithms
