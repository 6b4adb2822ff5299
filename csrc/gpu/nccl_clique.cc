#include "gpu/nccl_clique.h"

#include <chrono>
#include <exception>
#include <memory>

#include "common/digest.h"
#include "common/error.h"
#include "gpu/check.h"
#include "gpu/device.h"
#include "gpu/gpu_params.h"
#include "gpu/nccl_lib.h"
#include "gpu/watchdog.h"

namespace pytfcomm::gpu {
namespace {

// How long a blocking call may stay inside NCCL after ncclCommRevoke before
// the watchdog aborts the communicators under it.
constexpr double kRevokeGraceS = 5.0;
// How often a blocking call inside NCCL runs its keep_alive.
constexpr auto kWatchEvery = std::chrono::milliseconds(10);

TimePoint after_grace(TimePoint deadline) {
  const auto grace =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kRevokeGraceS));
  return deadline >= TimePoint::max() - grace ? TimePoint::max() : deadline + grace;
}

}  // namespace

NcclClique::NcclClique(const ncclUniqueId& id, int nranks, int first_rank,
                       const std::vector<CUcontext>& contexts, const char* name, TimePoint deadline)
    : name_(name),
      blocking_(nccl_blocking()),
      nranks_(nranks),
      first_rank_(first_rank),
      token_(fnv1a64(&id, sizeof(id))) {
  const NcclLib& lib = nccl();
  create(
      "ncclCommInitRankConfig", contexts,
      [&](size_t i, ncclConfig_t* config) {
        return lib.ncclCommInitRankConfig(&comms_[i], nranks, id, first_rank + static_cast<int>(i),
                                          config);
      },
      deadline);
}

NcclClique::NcclClique(NcclClique& parent, const std::vector<int>& excluded,
                       const std::vector<CUcontext>& contexts, const char* name, TimePoint deadline)
    : name_(name),
      blocking_(nccl_blocking()),
      nranks_(parent.nranks_ - static_cast<int>(excluded.size())),
      first_rank_(parent.first_rank_) {
  const NcclLib& lib = nccl();
  PTC_ENFORCE(lib.shrinks(), "ncclCommShrink or ncclCommRevoke is not loaded");
  uint64_t token = fnv1a64_mix(parent.token_, excluded.size());
  for (int r : excluded) {
    token = fnv1a64_mix(token, static_cast<uint64_t>(r));
    if (r < parent.first_rank_) --first_rank_;  // survivors keep their order
  }
  token_ = token;
  std::vector<int> ranks = excluded;  // NCCL takes a non-const list
  // The parent's handles are used by this thread only meanwhile.
  std::lock_guard<std::mutex> lock(parent.mu_);
  PTC_ENFORCE(parent.shrink_ready() && parent.comms_.size() == contexts.size(),
              "the NCCL communicator to shrink was not kept");
  create(
      "ncclCommShrink", contexts,
      [&](size_t i, ncclConfig_t* config) {
        return lib.ncclCommShrink(parent.comms_[i], ranks.data(), static_cast<int>(ranks.size()),
                                  &comms_[i], config, kNcclShrinkAbort);
      },
      deadline);
}

void NcclClique::create(const char* what, const std::vector<CUcontext>& contexts,
                        const std::function<ncclResult_t(size_t, ncclConfig_t*)>& make,
                        TimePoint deadline) {
  const NcclLib& lib = nccl();
  comms_.assign(contexts.size(), nullptr);
  ncclResult_t first = ncclSuccess;
  std::exception_ptr err;
  {
    // One thread creates several ranks: NCCL requires a group for that,
    // and the group must be closed whatever happens inside it.
    std::lock_guard<std::mutex> lock(mu_);
    lib.ncclGroupStart();
    try {
      for (size_t i = 0; i < contexts.size(); ++i) {
        ScopedContext scope(contexts[i]);
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = blocking_ ? 1 : 0;
        ncclResult_t r = make(i, &config);
        if (first == ncclSuccess && r != ncclInProgress) first = r;
      }
    } catch (...) {
      err = std::current_exception();
    }
    // Blocking: the group's end waits for every rank (bounded: a creation
    // cannot be revoked, so the watchdog aborts it at the deadline).
    ncclResult_t r = blocking_ && !err
                         ? bounded(what, deadline, false, [&] { return lib.ncclGroupEnd(); })
                         : lib.ncclGroupEnd();
    if (first == ncclSuccess && r != ncclInProgress) first = r;
  }
  try {
    if (err) std::rethrow_exception(err);
    if (first != ncclSuccess) raise(0, first, what);
    for (size_t i = 0; i < comms_.size(); ++i) settle(i, ncclInProgress, what, deadline);
  } catch (const std::exception& e) {
    // No destructor for a constructor that throws: release NCCL here.
    abort(str_cat("NCCL set-up (", name_, ", ", what, ") failed: ", e.what()));
    throw;
  }
}

NcclClique::~NcclClique() {
  std::lock_guard<std::mutex> lock(mu_);
  const NcclLib& lib = nccl();
  if (aborted_.load()) {
    // abort() released everything, or kept the handles for a shrink.
    if (!handles_aborted_.load()) {
      for (ncclComm_t c : comms_) {
        if (c != nullptr) lib.ncclCommAbort(c);
      }
    }
    return;
  }
  // Finalize flushes outstanding work (a group: one thread, several ranks);
  // bounded, and aborted past the bound.
  const TimePoint deadline = deadline_after(10.0);
  auto finalize = [&] {
    lib.ncclGroupStart();
    for (ncclComm_t c : comms_) lib.ncclCommFinalize(c);
    return lib.ncclGroupEnd();
  };
  if (blocking_) {
    try {
      bounded("ncclCommFinalize", deadline, false, finalize);
    } catch (const std::exception&) {
      return;  // aborted
    }
  } else {
    finalize();
  }
  const TimePoint start = Clock::now();
  for (ncclComm_t c : comms_) {
    ncclResult_t state = ncclInProgress;
    while (state == ncclInProgress && Clock::now() < deadline) {
      if (lib.ncclCommGetAsyncError(c, &state) != ncclSuccess) break;
      if (state == ncclInProgress) poll_pause(start);
    }
    if (state == ncclSuccess) {
      lib.ncclCommDestroy(c);
    } else {
      lib.ncclCommAbort(c);
    }
  }
}

void NcclClique::abort_locked(const std::string& why) noexcept {
  if (aborted_.load()) return;
  why_ = why;
  aborted_.store(true);
  const NcclLib& lib = nccl();                // loaded, or there would be no clique
  const bool done = handles_aborted_.load();  // by the watchdog, under a call
  if (keep_.load() && !done && lib.shrinks()) {
    // Kept for the survivors' ncclCommShrink, revoked: ncclCommRevoke ends
    // what is still in flight. The destructor aborts them when no shrink
    // takes them.
    if (!revoked_.load()) revoke_handles();
    kept_.store(true);
    return;
  }
  for (ncclComm_t& c : comms_) {
    if (c != nullptr && !done) lib.ncclCommAbort(c);
    c = nullptr;
  }
}

void NcclClique::revoke_handles() noexcept {
  const NcclLib& lib = nccl();
  revoked_.store(true);
  for (ncclComm_t c : comms_) {
    if (c != nullptr) lib.ncclCommRevoke(c, 0 /* NCCL_REVOKE_DEFAULT */);
  }
}

void NcclClique::abort_handles() noexcept {
  if (handles_aborted_.exchange(true)) return;
  const NcclLib& lib = nccl();
  for (ncclComm_t c : comms_) {
    if (c != nullptr) lib.ncclCommAbort(c);
  }
}

ncclResult_t NcclClique::bounded(const char* what, TimePoint deadline, bool revocable,
                                 const std::function<ncclResult_t()>& call,
                                 const std::function<void()>& keep_alive) {
  std::atomic<bool> stepped_in{false};
  std::exception_ptr lost;  // what keep_alive threw (on the watchdog thread)
  ncclResult_t r = ncclSuccess;
  {
    // The alarms fire only while `call` runs: their destructors wait for a
    // firing one, and mu_ (held) keeps comms_ as they are meanwhile. They
    // all run on the watchdog's one thread, one at a time.
    auto step_in = [&] {
      stepped_in.store(true);
      if (revocable) {
        revoke_handles();
      } else {
        abort_handles();
      }
    };
    WatchdogAlarm stop(deadline, step_in);
    WatchdogAlarm last(after_grace(deadline), [&] {
      stepped_in.store(true);
      abort_handles();
    });
    std::unique_ptr<WatchdogAlarm> watch;
    if (keep_alive) {
      watch = std::make_unique<WatchdogAlarm>(
          Clock::now() + kWatchEvery,
          [&] {
            if (lost || stepped_in.load()) return;
            try {
              keep_alive();
            } catch (...) {
              lost = std::current_exception();
              step_in();
            }
          },
          kWatchEvery);
    }
    r = call();
  }
  if (!stepped_in.load()) return r;
  if (lost) {
    try {
      std::rethrow_exception(lost);
    } catch (const std::exception& e) {
      abort_locked(str_cat(what, ": ", e.what()));
      throw;
    }
  }
  const char* how = revocable ? "revoked (ncclCommRevoke), then aborted" : "aborted";
  abort_locked(str_cat("timed out in ", what, " (NCCL was ", how, ")"));
  PTC_THROW(kTimeout, "timed out in ", what, ": NCCL had not returned by the deadline and was ",
            how,
            ": a rank or local replica stopped before the collective, hung, or is slower "
            "than PYTFCOMM_TIMEOUT");
}

void NcclClique::abort(const std::string& why) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  abort_locked(why);
}

void NcclClique::raise(size_t i, ncclResult_t r, const char* what) {
  const NcclLib& lib = nccl();
  std::string last;
  {
    std::lock_guard<std::mutex> lock(mu_);  // an aborted communicator is freed
    if (!aborted_.load()) last = lib.ncclGetLastError(i < comms_.size() ? comms_[i] : nullptr);
    abort_locked(str_cat("NCCL: ", what, " failed: ", lib.ncclGetErrorString(r),
                         last.empty() ? "" : str_cat(" (", last, ")")));
  }
  throw_nccl_error(r, what, last, __FILE__, __LINE__);
}

void NcclClique::settle(size_t i, ncclResult_t r, const char* what, TimePoint deadline) {
  const NcclLib& lib = nccl();
  const TimePoint start = Clock::now();
  while (r == ncclInProgress) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (aborted_.load()) PTC_THROW(kClosed, "the NCCL communicator was aborted: ", why_);
      ncclResult_t q = lib.ncclCommGetAsyncError(comms_[i], &r);
      if (q != ncclSuccess) r = q;
    }
    if (r != ncclInProgress) break;
    if (Clock::now() >= deadline) {
      abort(str_cat("timed out in ", what));
      PTC_THROW(kTimeout, "timed out in ", what,
                " waiting for the other ranks or GPUs (NCCL was aborted): one is missing, hung "
                "or slower than PYTFCOMM_TIMEOUT");
    }
    poll_pause(start);
  }
  if (r != ncclSuccess) raise(i, r, what);
}

void NcclClique::launch(const char* what,
                        const std::function<ncclResult_t(const ncclComm_t*)>& enqueue,
                        TimePoint deadline, const std::function<void()>& keep_alive) {
  const NcclLib& lib = nccl();
  ncclResult_t r = ncclSuccess;
  std::exception_ptr err;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.load()) PTC_THROW(kClosed, "the NCCL communicator was aborted earlier: ", why_);
    lib.ncclGroupStart();
    try {
      r = enqueue(comms_.data());
    } catch (...) {
      err = std::current_exception();  // the group must still be closed
    }
    // Blocking: the end returns once NCCL took the work (bounded).
    ncclResult_t end = blocking_ && !err ? bounded(
                                               what, deadline, true,
                                               [&] { return lib.ncclGroupEnd(); }, keep_alive)
                                         : lib.ncclGroupEnd();
    if (r == ncclSuccess || r == ncclInProgress) r = end;
  }
  if (err) {
    abort(str_cat(what, ": a launch failed half-way"));
    std::rethrow_exception(err);
  }
  if (r != ncclSuccess && r != ncclInProgress) raise(0, r, what);
  if (blocking_) return;  // nothing in progress
  for (size_t i = 0; i < comms_.size(); ++i) settle(i, r, what, deadline);
}

void NcclClique::check(const char* what) {
  if (aborted_.load()) PTC_THROW(kClosed, "the NCCL communicator was aborted: ", why_);
  size_t bad = comms_.size();
  ncclResult_t state = ncclSuccess;
  {
    // A blocking launch in flight holds the mutex (bounded by the watchdog):
    // this cheap check then waits for the next turn instead.
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) return;
    if (aborted_.load()) PTC_THROW(kClosed, "the NCCL communicator was aborted: ", why_);
    const NcclLib& lib = nccl();
    for (size_t i = 0; i < comms_.size() && bad == comms_.size(); ++i) {
      ncclResult_t s = ncclSuccess;
      lib.ncclCommGetAsyncError(comms_[i], &s);
      if (s != ncclSuccess && s != ncclInProgress) {
        bad = i;
        state = s;
      }
    }
  }
  // A peer that died or a broken connection shows up here.
  if (bad != comms_.size()) raise(bad, state, what);
}

}  // namespace pytfcomm::gpu
