// The data movement of one decided collective (execute.cc): which algorithm,
// in which segments, in which scratch. Only the driving thread runs it
// (engine/driver.h owns it); the choices it makes from the agreed
// configuration alone (choose_allreduce, allreduce_segment) are the same on
// every rank and any thread may ask for them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "algorithms/collective.h"
#include "common/algorithm.h"
#include "engine/negotiator.h"
#include "engine/request.h"
#include "transport/transport.h"

namespace pytfcomm {

class StallInspector;  // observe/stall_inspector.h
class TimelineSlot;
struct EngineConfig;

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

 private:
  void execute_eager(Request& r, const Decision& d);
  void run_algorithm(Request& r, const transport::MessageMeta& meta);
  Algorithm resolve_allreduce(Algorithm asked, size_t bytes) const;

  const EngineConfig& cfg_;
  transport::Transport* transport_;  // valid while this thread drives
  StallInspector* inspector_;
  const TimelineSlot& timeline_;
  std::string& context_;
  algorithms::Workspace workspace_;
  uint32_t exec_seq_ = 0;
  Algorithm last_algorithm_ = Algorithm::kAuto;
};

}  // namespace pytfcomm
