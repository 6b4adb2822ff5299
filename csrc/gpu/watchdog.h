// One thread per process that runs a callback at a time point unless it was
// disarmed first: the bound on NCCL calls that block (gpu/nccl_clique.h).
// Arming and disarming take a mutex and wake the thread at most; no thread
// is started per call.
#pragma once

#include <cstdint>
#include <functional>

#include "common/clock.h"

namespace pytfcomm::gpu {

// Runs `fire` on the watchdog thread at `when` (and, with a non-zero
// `every`, again every `every` after each run) unless destroyed first. The
// destructor waits for a `fire` already running, so what it captures may
// live on the arming thread's stack. `fire` must not throw or arm.
class WatchdogAlarm {
 public:
  WatchdogAlarm(TimePoint when, std::function<void()> fire,
                Clock::duration every = Clock::duration::zero());
  ~WatchdogAlarm();
  WatchdogAlarm(const WatchdogAlarm&) = delete;
  WatchdogAlarm& operator=(const WatchdogAlarm&) = delete;

  bool fired() const;  // `fire` ran (or is running)

 private:
  uint64_t id_;
};

}  // namespace pytfcomm::gpu
