// The data movement of one decided collective (execute.cc): which algorithm,
// in which segments, in which scratch. Only the driving thread runs it
// (engine/driver.h owns it); the choices it makes from the agreed
// configuration alone (choose_allreduce, allreduce_segment) are the same on
// every rank and any thread may ask for them.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "algorithms/algorithms.h"
#include "algorithms/collective.h"
#include "common/algorithm.h"
#include "engine/negotiator.h"
#include "engine/request.h"
#include "transport/transport.h"

namespace pytfcomm {

class StallInspector;  // observe/stall_inspector.h
class TimelineSlot;
struct EngineConfig;

// The metadata every message of `r` carries, as its `seq`-th collective.
transport::MessageMeta meta_of(const Request& r, uint32_t seq);

class CollectiveExecutor {
 public:
  // `context`: the driver's description of what it does, for messages (the
  // executor names the collective in it while the data moves).
  CollectiveExecutor(const EngineConfig& cfg, transport::Transport* transport,
                     StallInspector* inspector, const TimelineSlot& timeline, std::string& context);
  CollectiveExecutor(const CollectiveExecutor&) = delete;
  CollectiveExecutor& operator=(const CollectiveExecutor&) = delete;

  void execute(Request& r, const Decision& d);

  // The algorithm "auto" would pick for an all-reduce of `bytes` (kOneShot:
  // within the negotiation round, when every rank asks in the same round).
  Algorithm choose_allreduce(size_t bytes) const;
  // The pipeline segment algorithm `a` runs an all-reduce of `bytes` in.
  size_t allreduce_segment(Algorithm a, size_t bytes) const;
  Algorithm last_algorithm() const { return last_algorithm_; }

  // First messages sent ahead (sent_ahead.cc, docs/negotiation.md). Before
  // this rank publishes a record of `round` whose only announcement is `r`
  // (not run within the round: its input does not ride in the record):
  // whether r's first message can go right behind it (then the record says
  // so, and send_ahead() sends it once the record is out).
  bool can_send_ahead(const Request& r);
  void send_ahead(const Request& r, uint64_t round);
  // A round that went the fast path with `r` alone: which of the first
  // messages of r's pairwise exchange went ahead (this rank's, its partner's,
  // as their records say).
  algorithms::Ahead ahead_in_round(const Request& r, uint64_t round);
  // How many first messages this rank sent ahead, and how many of its
  // partners' it used (the others were dropped: their rounds decided otherwise).
  uint64_t ahead_sent() const { return ahead_sent_.load(std::memory_order_relaxed); }
  uint64_t ahead_taken() const { return ahead_taken_.load(std::memory_order_relaxed); }

 private:
  // What r's first message would be: its peer (-1: none goes ahead), bytes
  // and meta; `phase` of the algorithm r runs.
  algorithms::FirstSend first_send_of(const Request& r, transport::MessageMeta* meta) const;
  void execute_eager(Request& r, const Decision& d);
  void run_algorithm(Request& r, const transport::MessageMeta& meta,
                     const algorithms::Ahead& ahead);
  Algorithm resolve_allreduce(Algorithm asked, size_t bytes) const;

  const EngineConfig& cfg_;
  transport::Transport* transport_;  // valid while this thread drives
  StallInspector* inspector_;
  const TimelineSlot& timeline_;
  std::string& context_;
  algorithms::Workspace workspace_;
  uint32_t exec_seq_ = 0;
  Algorithm last_algorithm_ = Algorithm::kAuto;
  uint64_t ahead_round_ = 0;  // the round whose record said this rank sent ahead
  CollectiveKey ahead_key_{};
  std::atomic<uint64_t> ahead_sent_{0}, ahead_taken_{0};
};

}  // namespace pytfcomm
