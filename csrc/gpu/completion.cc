#include "gpu/completion.h"

#include "common/error.h"
#include "gpu/cuda_driver.h"
#include "gpu/device.h"
#include "gpu/event_poller.h"

namespace pytfcomm::gpu {
namespace {

std::string timeout_text(const char* what) {
  return str_cat("timed out in ", what,
                 " on the GPU (NCCL was aborted): a rank or local replica did not join in time, "
                 "hung, or is slower than PYTFCOMM_TIMEOUT");
}

}  // namespace

void wait_member(const Member& m, Clique* clique, TimePoint deadline, const char* what,
                 const std::function<void()>& keep_alive) {
  const CudaDriver& d = driver();
  ScopedContext scope(m.ctx);
  Event done;
  done.record(m.stream);
  const TimePoint start = Clock::now();
  TimePoint next_beat = start;
  for (;;) {
    CUresult q = d.cuEventQuery(done.get());
    if (q == CUDA_SUCCESS) return;
    if (q != CUDA_ERROR_NOT_READY) {
      // NCCL's own error, when it has one, says more (a lost peer).
      if (clique) clique->poll_errors(what);
      std::string msg = str_cat("CUDA failed during ", what, ": ", cu_error_text(q));
      if (clique) clique->abort_nccl(msg);
      PTC_THROW(kInternal, msg);
    }
    // A peer that died or a broken connection shows up as an async error.
    if (clique) clique->poll_errors(what);
    if (Clock::now() >= deadline) {
      if (clique) clique->abort_nccl(str_cat("timed out in ", what));
      PTC_THROW(kTimeout, timeout_text(what));
    }
    // A peer that gave up (its NCCL failed) says so over the host transport.
    if (keep_alive && Clock::now() >= next_beat) {
      next_beat = Clock::now() + std::chrono::milliseconds(1);
      try {
        keep_alive();
      } catch (const std::exception& e) {
        if (clique) clique->abort_nccl(e.what());
        throw;
      }
    }
    poll_pause(start);
  }
}

void complete_after(Member& m, const std::shared_ptr<Clique>& clique, TimePoint deadline,
                    const char* what, std::shared_ptr<char> keep) {
  const CudaDriver& d = driver();
  CUevent ev = nullptr;
  {
    ScopedContext scope(m.ctx);
    PTC_CU_CHECK(d.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    CUresult r = d.cuEventRecord(ev, m.stream);
    if (r != CUDA_SUCCESS) {
      d.cuEventDestroy_v2(ev);
      PTC_CU_CHECK(r);
    }
  }
  struct State {
    bool reported = false;
    TimePoint grace;
  };
  watch([ev, ctx = m.ctx, done = std::move(m.done), clique, deadline, what, keep = std::move(keep),
         st = State{}]() mutable {
    const CudaDriver& drv = driver();
    auto report = [&](std::exception_ptr e) {
      if (!st.reported) done(e);
      if (e && !st.reported) st.grace = Clock::now() + std::chrono::seconds(5);
      st.reported = true;
    };
    try {
      ScopedContext scope(ctx);
      CUresult r = drv.cuEventQuery(ev);
      if (r == CUDA_ERROR_NOT_READY) {
        // After an error the op has been answered; wait (a while) only so
        // that staging memory is not reused under a copy still in flight.
        if (st.reported) {
          if (Clock::now() < st.grace) return false;
          drv.cuEventDestroy_v2(ev);
          return true;
        }
        if (clique) clique->check(what);
        if (Clock::now() < deadline) return false;
        std::string msg = timeout_text(what);
        if (clique) clique->fail(msg);
        report(error_ptr(ErrorKind::kTimeout, msg));
        return false;
      }
      if (r != CUDA_SUCCESS) {
        if (clique) clique->check(what);  // NCCL's own error says more
        std::string msg = str_cat("CUDA failed during ", what, ": ", cu_error_text(r));
        if (clique) clique->fail(msg);
        report(error_ptr(ErrorKind::kInternal, msg));
      } else {
        report(nullptr);
      }
      drv.cuEventDestroy_v2(ev);
      return true;
    } catch (...) {
      report(std::current_exception());
      return false;  // keep polling the event until the grace period ends
    }
  });
}

}  // namespace pytfcomm::gpu
