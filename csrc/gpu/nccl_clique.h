// One NCCL communicator as this process holds it: the ranks [first_rank,
// first_rank + contexts.size()) of an `nranks`-rank NCCL communicator, one
// per local GPU. The only owner of ncclComm_t in pytfcomm, and so the one
// place for their set-up, settling, error checks, abort and release.
//
// NCCL has no timeout, so every wait is bounded here, in one of two ways
// (gpu_params.h's nccl_blocking()):
// - Blocking (ncclConfig_t.blocking = 1; the loaded NCCL has ncclCommRevoke,
//   2.28+): a call returns when NCCL accepted the work, with no thread of
//   NCCL's own per launch. Each call that may block is covered by a
//   watchdog alarm (gpu/watchdog.h): at the deadline it revokes the
//   communicators (ncclCommRevoke ends in-flight operations), the call
//   returns, and the caller aborts them and throws kTimeout; a call still
//   inside NCCL kRevokeGraceS later is aborted from the watchdog. An init
//   (which cannot be revoked) is aborted at the deadline. Meanwhile the
//   watchdog runs the launch's keep_alive (the host side's liveness): a lost
//   peer revokes them at once, and the caller throws its kPeerLost.
// - Non-blocking (blocking = 0; older NCCL): nothing waits inside NCCL, a
//   call that returns ncclInProgress is polled (settled) against the
//   deadline.
// Any thread may abort() them (the poller at a deadline). A mutex covers
// each NCCL call, so an abort cannot free a communicator under a launch;
// on the blocking path an abort waits for a launch in flight, which the
// watchdog bounds.
#pragma once

#include <cuda.h>
#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"

namespace pytfcomm::gpu {

class NcclClique {
 public:
  // Collective across all `nranks` ranks (other processes too): each
  // process constructs its own ranks with the same `id`. `name` ("world",
  // "within the host", ...) is for messages. Throws after releasing
  // whatever was created.
  NcclClique(const ncclUniqueId& id, int nranks, int first_rank,
             const std::vector<CUcontext>& contexts, const char* name, TimePoint deadline);
  // The survivors' communicator, shrunk from `parent` (ncclCommShrink with
  // NCCL_SHRINK_ABORT) without the NCCL ranks `excluded` (sorted): collective
  // across the survivors, who keep their order. `parent` must be kept()
  // (shrink_ready()); its handles stay its own (release it after). Bounded
  // like an init; throws after releasing whatever was created.
  NcclClique(NcclClique& parent, const std::vector<int>& excluded,
             const std::vector<CUcontext>& contexts, const char* name, TimePoint deadline);
  // Finalize (bounded) and destroy; after an abort, nothing, or
  // ncclCommAbort of the handles it kept.
  ~NcclClique();
  NcclClique(const NcclClique&) = delete;
  NcclClique& operator=(const NcclClique&) = delete;

  int members() const { return static_cast<int>(comms_.size()); }
  bool blocking() const { return blocking_; }
  const char* name() const { return name_; }

  // Runs enqueue(comms) between ncclGroupStart and ncclGroupEnd (it returns
  // the first failing result), then polls until NCCL accepted every call.
  // Nothing waits for the GPU. Throws on any NCCL error, after abort().
  // `keep_alive` (engine/external.h; may be empty): what a blocking launch
  // runs from the watchdog while it is inside NCCL, the thread that called
  // launch() being held there; what it throws is thrown, after abort().
  void launch(const char* what, const std::function<ncclResult_t(const ncclComm_t*)>& enqueue,
              TimePoint deadline, const std::function<void()>& keep_alive = nullptr);

  // Throws (after abort()) when NCCL reported an asynchronous error (a peer
  // died, a connection broke); kClosed once aborted. Cheap.
  void check(const char* what);

  // Aborts every communicator and remembers `why`. Never throws; idempotent.
  // After keep_on_abort() (and with an NCCL that shrinks, NcclLib::
  // shrinks()) the handles are kept instead, revoked (ncclCommRevoke ends
  // the operations in flight), so that the survivors can shrink them:
  // pytfcomm uses them for nothing else.
  void abort(const std::string& why) noexcept;
  bool aborted() const { return aborted_.load(); }
  void keep_on_abort() { keep_.store(true); }
  // Aborted, with the handles kept for ncclCommShrink.
  bool shrink_ready() const { return aborted_.load() && kept_.load() && !handles_aborted_.load(); }

  // Which NCCL communicator this is, the same on every rank of it: the
  // ncclUniqueId's digest, or for a shrunk one, its parent's and the
  // excluded ranks'. With nranks() and first_rank(), what the survivors
  // compare before shrinking (gpu/clique.h).
  uint64_t token() const { return token_; }
  int nranks() const { return nranks_; }
  int first_rank() const { return first_rank_; }

 private:
  // The constructors' common part: make(i, config) creates comms_[i]
  // (ncclCommInitRankConfig or ncclCommShrink), in one group, then settles.
  void create(const char* what, const std::vector<CUcontext>& contexts,
              const std::function<ncclResult_t(size_t, ncclConfig_t*)>& make, TimePoint deadline);
  void settle(size_t i, ncclResult_t r, const char* what, TimePoint deadline);
  [[noreturn]] void raise(size_t i, ncclResult_t r, const char* what);
  void abort_locked(const std::string& why) noexcept;
  // Runs `call` (an NCCL call that may block) under the watchdog: revoked at
  // `deadline` or when `keep_alive` (run every kWatchEvery meanwhile; may be
  // empty) throws, aborted kRevokeGraceS later. mu_ is held. Returns its
  // result; throws kTimeout, or what keep_alive threw, (after abort) when
  // the watchdog had to step in.
  ncclResult_t bounded(const char* what, TimePoint deadline, bool revocable,
                       const std::function<ncclResult_t()>& call,
                       const std::function<void()>& keep_alive = nullptr);
  void revoke_handles() noexcept;  // from the watchdog, mu_ held by the caller
  void abort_handles() noexcept;   // likewise, the last resort

  const char* name_;
  bool blocking_ = false;
  int nranks_ = 0;
  int first_rank_ = 0;
  uint64_t token_ = 0;
  std::vector<ncclComm_t> comms_;
  std::atomic<bool> handles_aborted_{false};  // abort_handles() ran
  std::atomic<bool> revoked_{false};          // revoke_handles() ran
  std::atomic<bool> keep_{false};             // keep_on_abort()
  std::atomic<bool> kept_{false};             // abort() kept the handles
  std::mutex mu_;                             // held for each NCCL call
  std::atomic<bool> aborted_{false};
  std::string why_;  // written once, before aborted_ is set
};

}  // namespace pytfcomm::gpu
