#include "gpu/nccl_clique.h"

#include <exception>

#include "common/error.h"
#include "gpu/check.h"
#include "gpu/device.h"
#include "gpu/nccl_lib.h"

namespace pytfcomm::gpu {

NcclClique::NcclClique(const ncclUniqueId& id, int nranks, int first_rank,
                       const std::vector<CUcontext>& contexts, const char* name, TimePoint deadline)
    : name_(name) {
  const NcclLib& lib = nccl();
  comms_.assign(contexts.size(), nullptr);
  ncclResult_t first = ncclSuccess;
  std::exception_ptr err;
  {
    // One thread initialises several ranks: NCCL requires a group for
    // that, and the group must be closed whatever happens inside it.
    std::lock_guard<std::mutex> lock(mu_);
    lib.ncclGroupStart();
    try {
      for (size_t i = 0; i < contexts.size(); ++i) {
        ScopedContext scope(contexts[i]);
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        ncclResult_t r = lib.ncclCommInitRankConfig(&comms_[i], nranks, id,
                                                    first_rank + static_cast<int>(i), &config);
        if (first == ncclSuccess && r != ncclInProgress) first = r;
      }
    } catch (...) {
      err = std::current_exception();
    }
    ncclResult_t r = lib.ncclGroupEnd();
    if (first == ncclSuccess && r != ncclInProgress) first = r;
  }
  try {
    if (err) std::rethrow_exception(err);
    if (first != ncclSuccess) raise(0, first, "ncclCommInitRankConfig");
    for (size_t i = 0; i < comms_.size(); ++i) {
      settle(i, ncclInProgress, "ncclCommInitRankConfig", deadline);
    }
  } catch (const std::exception& e) {
    // No destructor for a constructor that throws: release NCCL here.
    abort(str_cat("NCCL set-up (", name_, ") failed: ", e.what()));
    throw;
  }
}

NcclClique::~NcclClique() {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.load()) return;  // abort() released everything
  const NcclLib& lib = nccl();
  // Finalize flushes outstanding work (a group: one thread, several ranks);
  // bounded, and aborted past the bound.
  const TimePoint deadline = deadline_after(10.0);
  lib.ncclGroupStart();
  for (ncclComm_t c : comms_) lib.ncclCommFinalize(c);
  lib.ncclGroupEnd();
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
  const NcclLib& lib = nccl();  // loaded, or there would be no clique
  for (ncclComm_t& c : comms_) {
    if (c != nullptr) lib.ncclCommAbort(c);
    c = nullptr;
  }
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
                        TimePoint deadline) {
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
    ncclResult_t end = lib.ncclGroupEnd();
    if (r == ncclSuccess || r == ncclInProgress) r = end;
  }
  if (err) {
    abort(str_cat(what, ": a launch failed half-way"));
    std::rethrow_exception(err);
  }
  if (r != ncclSuccess && r != ncclInProgress) raise(0, r, what);
  for (size_t i = 0; i < comms_.size(); ++i) settle(i, r, what, deadline);
}

void NcclClique::check(const char* what) {
  if (aborted_.load()) PTC_THROW(kClosed, "the NCCL communicator was aborted: ", why_);
  size_t bad = comms_.size();
  ncclResult_t state = ncclSuccess;
  {
    std::lock_guard<std::mutex> lock(mu_);
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
