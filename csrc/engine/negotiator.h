// The negotiation's bookkeeping (docs/negotiation.md), without any I/O:
// what every rank has asked for and not yet run, and, after each round,
// which collectives every rank has asked for, in the order all ranks run
// them.
//
// Every rank applies the same records in the same rounds, so every rank's
// tables, and therefore its decisions, are identical: a collective runs on
// every rank or on none, and a disagreement on what it is (kind, dtype,
// shape, op, root, algorithm) is seen by every rank in the same round,
// before any of its data moves.
//
// The order: the common collectives in the order rank 0 asked for them (a
// collective rank 0 asked for early waits for the others; later ones that
// every rank asked for may run before it).
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "algorithms/collective.h"
#include "engine/agreed_cache.h"
#include "engine/request.h"
#include "engine/round_record.h"

namespace pytfcomm {

// A collective every rank has asked for.
struct Decision {
  CollectiveKey key;
  Request* mine = nullptr;  // this rank's request
  std::string mismatch;     // why the ranks disagree ("": they agree)
  // This rank has joined and did not ask for it: it takes part with nothing
  // of its own (identity values, no rows); `mine` is null, `desc` says what
  // the others asked for.
  bool adopted = false;
  Descriptor desc;
  int last_joined = -1;           // a join decision: the rank that joined last
  bool eager = false;             // runs on the round's records, no further message
  std::vector<const char*> data;  // eager inputs by rank (null: none)
  // Every rank's count, for per-rank-count kinds (empty: all equal to this
  // rank's, as when the one-entry fast path decided).
  std::vector<uint64_t> counts;
  // First messages that went ahead, behind the records (the one-entry fast
  // path only: CollectiveExecutor::ahead_in_round).
  algorithms::Ahead ahead;
};

class Negotiator {
 public:
  Negotiator(int rank, int size);

  // This rank's request `r` is in the record of the round about to be
  // published (under r->key, which no other pending request of this rank has).
  void announce(Request* r);
  // This rank's request under `k` is in the withdrawals of that record; its
  // caller has been told and the negotiator forgets it.
  void withdraw(const CollectiveKey& k);

  // Applies one round: records[r] is rank r's record (this rank's own too).
  // Confirmations are expanded with the agreed cache; one whose sender's
  // cache is not this rank's (digest), or that names an empty slot, throws.
  void absorb(uint64_t round, const std::vector<ParsedRecord>& records);
  // The collectives the last absorbed round made common to every rank, in
  // execution order; each is forgotten by the tables as it is returned.
  // First come this rank's calls on streams whose ranks are out of step,
  // failed with the reason (out_of_step.cc).
  std::vector<Decision> decide();

  // A stream whose ranks were out of step: every rank's next call on it is
  // numbered `next` (docs/negotiation.md "Out of step").
  struct Resync {
    uint64_t stream;
    uint64_t next;
  };
  // The streams the last decide() brought back into step.
  const std::vector<Resync>& resyncs() const { return resyncs_; }

  // This rank's announced, undecided requests.
  const std::unordered_map<CollectiveKey, Request*, CollectiveKeyHash>& mine() const {
    return mine_;
  }
  bool is_mine(const CollectiveKey& k) const { return mine_.count(k) != 0; }
  // Nothing announced and undecided on any rank (as of the last round).
  bool tables_empty() const;
  // Forgets this rank's request under `k`, decided outside decide() (the
  // engine's fast path for a round in which every rank asked only for `k`);
  // `label` is rank 0's, which the cache learns with the collective.
  void take(const Request& mine, const std::string& label);
  // What records may name by slot (agreed_cache.h). decide() and take()
  // change it, the same way on every rank.
  const AgreedCache& cache() const { return cache_; }
  // What other ranks asked for that this rank has not, and which ranks have
  // not asked for `k` yet, for timeout messages.
  std::string describe_unmatched(const CollectiveKey& k, size_t limit = 4) const;
  std::vector<int> missing(const CollectiveKey& k) const;
  // For the stall warning of a rank whose collectives no other rank has
  // asked for (as of the last round): what every rank waits in, oldest first
  // ("rank 0 waits in 'allreduce train_step/... #4' (allreduce(float32 x
  // 1024, ...), key 0x...#4); rank 1 waits in ..."), then why nothing runs
  // and what to do.
  std::string describe_waits(size_t per_rank = 2, size_t max_groups = 8) const;

 private:
  struct Entry {
    Descriptor desc;
    std::string label;
    uint64_t round = 0;
    bool eager = false;
    bool external = false;
    const char* data = nullptr;  // valid only during its announcing round
  };
  using Table = std::unordered_map<CollectiveKey, Entry, CollectiveKeyHash>;
  // A collective a rank gave up on (its deadline passed), kept a while so
  // that a rank that times out later can still say what that rank waited in.
  struct Withdrawn {
    std::string label;
    Descriptor desc;
    uint64_t round = 0;  // the round that withdrew it
  };
  static constexpr size_t kWithdrawnKept = 4;  // per rank, the latest
  std::string disagreement(const CollectiveKey& k) const;
  std::string join_conflict(const CollectiveKey& k) const;
  bool eager_ok(const CollectiveKey& k) const;
  bool joined(int r) const { return joined_round_[static_cast<size_t>(r)] >= 0; }
  bool live(const CollectiveKey& k) const;
  // Whether every rank asked for `k` or, but for a join, has joined.
  bool common(const CollectiveKey& k) const;
  const Entry& first_entry(const CollectiveKey& k) const;
  // Fails the pending keys of every touched stream whose ranks are out of
  // step (out_of_step.cc): this rank's into `out`, every rank's from the tables.
  void fail_out_of_step(std::vector<Decision>* out);

  int rank_;
  int size_;
  uint64_t round_ = 0;         // the last round absorbed
  std::vector<Table> tables_;  // by rank
  // Rank 0's announcements, oldest first (while rank 0 has joined: every
  // rank's, in rank order, so the others' collectives still get an order).
  std::deque<CollectiveKey> order_;
  std::unordered_set<CollectiveKey, CollectiveKeyHash> ordered_;
  std::vector<int64_t> joined_round_;             // by rank: the round its join came in, or -1
  std::vector<std::deque<Withdrawn>> withdrawn_;  // by rank, oldest first
  std::unordered_map<CollectiveKey, Request*, CollectiveKeyHash> mine_;
  std::vector<uint64_t> touched_;  // streams in the last absorbed round's records
  std::vector<Resync> resyncs_;
  AgreedCache cache_;
  bool forget_cache_ = false;  // the last absorbed round withdrew or joined
  Announcement expanded_;      // a confirmation being absorbed
};

}  // namespace pytfcomm
