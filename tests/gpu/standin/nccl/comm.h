// A stand-in communicator: one rank's state in this process (one job: its
// life cycle, the join through the shared segment and the async-error
// state ncclCommGetAsyncError reports).
#pragma once

#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "nccl/knobs.h"
#include "nccl/segment.h"

namespace ptcsi_nccl {

struct Comm {
  int rank = 0;
  int nranks = 0;
  bool blocking = true;
  Knobs knobs;
  std::string name;   // the segment's name, for messages
  ncclUniqueId id{};  // what it was made from (ncclCommShrink derives its child's)
  std::unique_ptr<Segment> seg;

  std::atomic<bool> stop{false};        // aborted or destroyed: waits end, work fails
  std::atomic<bool> ready{false};       // every rank joined
  std::atomic<int> error{ncclSuccess};  // the async error (never ncclInProgress)
  std::atomic<int64_t> busy_until{0};   // PTCSI_NCCL_INPROGRESS: steady-clock ns
  std::atomic<int> pending{0};          // work items enqueued and not yet released
  std::atomic<bool> finalizing{false};
  std::atomic<bool> revoked{false};  // ncclCommRevoke: in progress until quiescent
  std::atomic<bool> stuck{false};    // PTCSI_NCCL_STOP_AT reached (non-blocking)
  std::atomic<uint64_t> calls{0};    // collectives issued (the fault knobs count these)

  // Serialises this rank's work items (streams may differ) and guards the
  // protocol counters below.
  std::mutex exec_mu;
  uint64_t seq = 0;   // collectives run
  uint64_t step = 0;  // barrier steps taken

  // Records the first asynchronous error and its text.
  void set_error(ncclResult_t r, const std::string& text);
  std::string error_text();
  // What ncclCommGetAsyncError reports now; an error's text also becomes
  // the calling thread's ncclGetLastError.
  ncclResult_t state();
  // Keeps the comm "busy" (ncclInProgress) for a few ms when the knob is on.
  void mark_busy();

 private:
  std::mutex mu_;
  std::string error_text_;
};

// Joins the segment for `id` (creating it if first) and claims c.rank.
// Misuse (nranks disagree, rank out of range or taken twice) fails this
// rank with ncclInvalidUsage and poisons the segment so every other rank's
// init fails too.
// `poison` (PTCSI_NCCL_SHRINK_FAIL): instead of claiming its rank, this
// rank poisons the segment with that text and fails (ncclInternalError).
ncclResult_t join(Comm& c, const ncclUniqueId& id, const std::string& poison = "");

// Handles: each ncclComm_t is a small never-freed token, so a handle used
// after abort/destroy is recognised (ncclInvalidArgument) and never reused.
ncclComm_t register_comm(std::shared_ptr<Comm> c);
std::shared_ptr<Comm> find_comm(ncclComm_t h);
std::shared_ptr<Comm> unregister_comm(ncclComm_t h);

int64_t now_ns();

}  // namespace ptcsi_nccl
