// The round driver (driver.cc; docs/negotiation.md): whichever thread holds
// the driver role (engine/request_queue.h) runs the negotiation rounds
// through it and the collectives they decide, with its executor. Everything
// here belongs to that one thread at a time; it takes the queue's mutex only
// inside the queue's calls, and never while it waits or moves data.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "common/error.h"
#include "engine/collective_executor.h"
#include "engine/negotiator.h"
#include "engine/request.h"
#include "engine/request_queue.h"
#include "engine/round_record.h"
#include "transport/transport.h"

namespace pytfcomm {

class StallInspector;  // observe/stall_inspector.h
class TimelineSlot;
struct EngineConfig;

class Driver {
 public:
  // `transport` stays valid while a thread drives: close() takes the driver
  // role for good before it releases the transport.
  Driver(const EngineConfig& cfg, RequestQueue& queue, transport::Transport* transport,
         StallInspector* inspector, const TimelineSlot& timeline);
  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;

  // One step of the negotiation after another, until done() (or a failure,
  // which fail() handles, or close()). The caller holds the driver role.
  void drive(const std::function<bool()>& done);
  // drive(), the waits bounded by `until` (a submitting thread's inline drive).
  void drive_until(TimePoint until, const std::function<bool()>& done);
  // A failure that ends the communicator: tell peers, fail every request.
  void fail(const std::exception_ptr& error, ErrorKind kind, const std::string& what);
  void finish(Request* r, std::exception_ptr error);
  // close(), with the driver role for good: fails every request the driver
  // holds, announced or not, with `error`.
  void abandon(const std::exception_ptr& error);

  CollectiveExecutor& executor() { return executor_; }
  const CollectiveExecutor& executor() const { return executor_; }

 private:
  enum class RoundState { kBetween, kInRound };

  void step(const std::function<bool()>& done);
  void take_submissions();
  void expire();
  void publish_round();
  void process_round();
  void run_decision(Decision& d);
  // This rank's part, as a joined rank, of a collective the others decided (join.cc).
  void run_adopted(const Decision& d);
  // Numbers this rank's next calls on `stream` from `next`, those made and
  // not yet announced included (out_of_step.cc).
  void resync_stream(uint64_t stream, uint64_t next);
  bool fast_round();
  // Whether `r` may run within a round, and how many input bytes it adds.
  bool eager_input(const Request& r, size_t* data_bytes) const;
  bool data_complete(const Descriptor& desc, const std::vector<const char*>& data) const;
  TimePoint earliest_deadline() const;

  const EngineConfig& cfg_;
  RequestQueue& queue_;
  transport::Transport* transport_;
  StallInspector* inspector_;

  Negotiator negotiator_;
  RoundState state_ = RoundState::kBetween;
  uint64_t round_ = 1;
  std::vector<Request*> fresh_;          // taken, not yet announced
  std::vector<CollectiveKey> withdraw_;  // announced, past their deadline
  TimePoint round_deadline_ = TimePoint::max();
  TimePoint inline_until_ = TimePoint::max();  // a submitting thread drives until then
  Decision fast_decision_;
  std::vector<const char*> fast_data_;
  Announcement fast_one_;   // a record's one collective (fast_round)
  std::string fast_label_;  // rank 0's label of it, which the agreed cache learns
  OwnedRequests owned_;     // asynchronous requests, until finished
  std::vector<ParsedRecord> parsed_;
  RecordWriter writer_;
  std::string context_;          // what the driver does now, for messages
  CollectiveExecutor executor_;  // after context_, which it writes too
};

}  // namespace pytfcomm
