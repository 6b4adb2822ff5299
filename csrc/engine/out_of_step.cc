// Streams whose ranks are out of step (docs/negotiation.md "Out of step").
//
// Each rank numbers its calls on a stream one after another and announces
// them in that order, so while every rank holds a pending call on a stream,
// their lowest pending numbers agree unless some rank dropped a number the
// others still hold or will never make: it skipped a call (an exception on
// that rank only), or gave up on one (a timeout) that another rank then
// made. Such calls can never pair, and every later call of that stream would
// pair with the wrong one or wait for its deadline. Every rank sees it in
// the same round, from the same records: the pending calls of the stream
// fail on every rank with the reason, and every rank numbers its next calls
// on it from the same number, so that they pair again.
//
// Only while every rank (but a joined one) holds a call on the stream: a rank
// that has announced nothing there may still be late with the missing one.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <unordered_map>

#include "common/error.h"
#include "engine/driver.h"
#include "engine/negotiator.h"

namespace pytfcomm {

void Negotiator::fail_out_of_step(std::vector<Decision>* out) {
  resyncs_.clear();
  if (touched_.empty()) return;
  std::sort(touched_.begin(), touched_.end());
  touched_.erase(std::unique(touched_.begin(), touched_.end()), touched_.end());
  // Every rank's lowest and highest pending number on each touched stream.
  struct Span {
    uint64_t lo = std::numeric_limits<uint64_t>::max();
    uint64_t hi = 0;
    const Entry* lowest = nullptr;
  };
  std::unordered_map<uint64_t, std::vector<Span>> spans;
  for (uint64_t s : touched_) spans[s].resize(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    for (const auto& kv : tables_[static_cast<size_t>(r)]) {
      auto it = spans.find(kv.first.stream);
      if (it == spans.end()) continue;
      Span& sp = it->second[static_cast<size_t>(r)];
      if (kv.first.seq < sp.lo) {
        sp.lo = kv.first.seq;
        sp.lowest = &kv.second;
      }
      sp.hi = std::max(sp.hi, kv.first.seq);
    }
  }
  for (uint64_t s : touched_) {
    const std::vector<Span>& sp = spans[s];
    bool every = true, differ = false;
    uint64_t lo = std::numeric_limits<uint64_t>::max(), next = 0;
    for (int r = 0; r < size_ && every; ++r) {
      const Span& x = sp[static_cast<size_t>(r)];
      if (!x.lowest) {
        // A rank with nothing here may still announce the missing number;
        // a joined rank takes part in the others' calls without announcing.
        every = joined(r) && s != kJoinStream;
        continue;
      }
      differ |= lo != std::numeric_limits<uint64_t>::max() && x.lo != lo;
      lo = std::min(lo, x.lo);
      next = std::max(next, x.hi + 1);
    }
    if (!every || !differ) continue;
    // "rank 0 'allreduce #1997 of MainThread'; rank 1 'allreduce #1996 of
    // MainThread'": each rank's lowest call there (ranks grouped by it).
    std::string who;
    std::vector<bool> told(static_cast<size_t>(size_), false);
    for (int r = 0, groups = 0; r < size_; ++r) {
      const Span& x = sp[static_cast<size_t>(r)];
      if (!x.lowest || told[static_cast<size_t>(r)]) continue;
      std::vector<int> same;
      for (int q = r; q < size_; ++q) {
        const Span& y = sp[static_cast<size_t>(q)];
        if (y.lowest && y.lo == x.lo) {
          same.push_back(q);
          told[static_cast<size_t>(q)] = true;
        }
      }
      if (groups++ == 8) {
        who += "; ...";
        break;
      }
      who += groups > 1 ? "; " : "";
      who += same.size() == 1 ? "rank " : "ranks ";
      for (size_t i = 0; i < same.size() && i < 8; ++i) who += str_cat(i ? ", " : "", same[i]);
      if (same.size() > 8) who += str_cat(" and ", same.size() - 8, " more");
      who += str_cat(" '", x.lowest->label, "'");
    }
    const std::string why = str_cat(
        "ranks are out of step on one stream of collectives (the lowest call each rank holds "
        "there: ",
        who,
        "). A rank skipped a collective the others made (an exception on one rank only?), or gave "
        "up on one (a timeout) before another rank made it; calls are matched by their count on "
        "each thread (or name= or TF op), so these can never pair. Every rank's pending calls on "
        "this stream fail with this error and every rank numbers its next call there #",
        next,
        ", so that the next calls pair again. Nothing of them was sent; this communicator "
        "is still usable. If instead a rank was only late (it reached a call after the others' "
        "deadline), its calls are now one behind theirs: stop the job rather than go on");
    for (int r = 0; r < size_; ++r) {
      Table& t = tables_[static_cast<size_t>(r)];
      for (auto it = t.begin(); it != t.end();) {
        if (it->first.stream != s) {
          ++it;
          continue;
        }
        if (r == rank_) {
          Decision d;
          d.key = it->first;
          d.desc = it->second.desc;
          d.mismatch = why;
          auto mine = mine_.find(it->first);
          PTC_ENFORCE(mine != mine_.end(), "a pending key of this rank it does not hold");
          d.mine = mine->second;
          mine_.erase(mine);
          out->push_back(std::move(d));
        }
        it = t.erase(it);
      }
      if (s == kJoinStream) joined_round_[static_cast<size_t>(r)] = -1;
    }
    resyncs_.push_back({s, next});
  }
  // This rank's calls in order, whatever order the table held them in.
  std::sort(out->begin(), out->end(), [](const Decision& a, const Decision& b) {
    return a.key.stream != b.key.stream ? a.key.stream < b.key.stream : a.key.seq < b.key.seq;
  });
}

void Driver::resync_stream(uint64_t stream, uint64_t next) {
  // Withdrawals not yet published of the calls that just failed.
  withdraw_.erase(std::remove_if(withdraw_.begin(), withdraw_.end(),
                                 [&](const CollectiveKey& k) { return k.stream == stream; }),
                  withdraw_.end());
  // Calls not announced yet: numbered from `next`, in the order they were made.
  queue_.restart_stream(stream, next, fresh_);
}

}  // namespace pytfcomm
