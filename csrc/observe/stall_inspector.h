// The stall inspector (PYTFCOMM_STALL_WARNING): when this rank has waited
// in a collective longer than the threshold, it finds out which ranks have
// not joined it and logs a warning naming them, once per threshold interval,
// long before PYTFCOMM_TIMEOUT fails the job.
//
// How it learns about the others (docs/reliability.md): a stalled rank sends
// a small STAT frame to every peer over the existing authenticated
// connections, queued between data frames, saying which collective it is in
// and asking for an answer. Every rank that is itself blocked inside
// pytfcomm (in this or another collective) answers with its own state from
// its wait loop. A rank that is not inside pytfcomm (late in user code,
// stopped, or stuck elsewhere) cannot answer: after a short grace period the
// asker names every rank that neither answered nor asked as one that has
// not joined. Nothing of this runs unless a wait blocks; a collective that
// makes progress never calls it, and it never throws.
//
// Shortly before the collective's deadline it asks once more, silently, so
// that a timeout names the rank that holds the job back (on_deadline) even
// on a rank that only waits on another waiting rank.
//
// Between negotiation rounds no frame is needed: every rank has read every
// rank's record, so a rank whose collectives the others have not asked for
// knows what each of them waits in instead (ranks in different collectives,
// or one that asks for none). The engine says so (begin_unmatched) and the
// warning quotes it, on every waiting rank, at the same interval.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "transport/liveness.h"

namespace pytfcomm {

class StallInspector : public transport::StatusObserver {
 public:
  // threshold_s <= 0: never warn (but still answer other ranks, and ask
  // before the deadline).
  StallInspector(int rank, int size, double threshold_s);

  void attach(transport::Liveness* t) { transport_ = t; }
  double threshold_s() const { return threshold_s_; }

  // Around each collective (called by Communicator::run, cheap).
  // timeout_s: this collective's deadline, quoted in the warning.
  void begin(const transport::MessageMeta& meta, const char* name, size_t bytes, double timeout_s,
             TimePoint now);
  void end();

  // Between rounds, waiting for the other ranks to ask for this rank's
  // collectives, the oldest asked for at `since` (its deadline `timeout_s`
  // after): once it has waited the threshold, and every interval after, a
  // warning with describe() (what every rank waits in). Called before each
  // such wait; the schedule carries over while `since` stays the same.
  void begin_unmatched(TimePoint since, double timeout_s, std::function<std::string()> describe);
  void end_unmatched() { unmatched_ = false; }

  TimePoint on_block(TimePoint now) noexcept override;
  void on_status(int peer, const transport::MessageMeta& meta, uint32_t flags) noexcept override;
  transport::StallVerdict on_deadline(TimePoint now) noexcept override;

  // The warning as it would be logged now.
  std::string report() const;

 private:
  struct PeerView {
    TimePoint heard_at{};  // when its last status frame arrived ({}: never)
    bool in_collective = false;
    transport::MessageMeta meta;  // the collective it said it is in (or last ran)
    bool owe_reply = false;       // it asked; answer at the next block
  };
  void ask_all(TimePoint now);
  TimePoint unmatched_turn(TimePoint now);
  void answer_owed() noexcept;
  uint32_t own_flags() const { return active_ ? uint32_t{transport::kStatusInCollective} : 0u; }

  int rank_;
  int size_;
  double threshold_s_;
  double timeout_s_ = 0;
  transport::Liveness* transport_ = nullptr;
  std::vector<PeerView> peers_;
  bool owed_ = false;  // some peer waits for an answer

  bool active_ = false;  // inside a collective
  transport::MessageMeta meta_;
  const char* name_ = "";
  size_t bytes_ = 0;
  TimePoint started_;
  TimePoint last_ask_ = TimePoint::max();
  TimePoint next_ask_ = TimePoint::max();
  TimePoint report_at_ = TimePoint::max();
  TimePoint deadline_ = TimePoint::max();
  TimePoint final_ask_ = TimePoint::max();  // when to ask before the deadline
  TimePoint final_asked_at_{};              // {}: not yet

  bool unmatched_ = false;  // between rounds, with collectives nobody else asked for
  std::function<std::string()> describe_;
  double unmatched_timeout_s_ = 0;
  TimePoint unmatched_since_{};
  TimePoint unmatched_next_ = TimePoint::max();
  TimePoint unmatched_reported_{};  // the last such warning ({}: none)
};

}  // namespace pytfcomm
