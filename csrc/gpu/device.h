// One GPU as pytfcomm uses it: the device's primary context (the one CuPy,
// PyTorch and NCCL use too), pytfcomm's own streams, and the embedded
// kernels. Made current on the calling thread for the span of a collective.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

#include "common/clock.h"
#include "common/dtype.h"

namespace pytfcomm::gpu {

class Device {
 public:
  explicit Device(int ordinal);  // throws kConfig when the ordinal is not a visible GPU
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  int ordinal() const { return ordinal_; }
  CUcontext context() const { return ctx_; }
  // Where collectives run (NCCL launches, kernels, the staging copies out).
  CUstream stream() const { return stream_; }
  // A second stream for staging copies back in, so that device-to-host and
  // host-to-device copies overlap.
  CUstream copy_in_stream() const { return copy_in_; }

  // p[i] /= divisor for `count` elements (integers truncate), on `s`
  // (default: stream(); TF kernels pass TF's stream of this device).
  void divide(CUdeviceptr p, size_t count, DType dtype, int64_t divisor, CUstream s = nullptr);
  // p[i] = p[i] != 0 for `count` bytes, on `s` (default: stream()).
  void bool_normalize(CUdeviceptr p, size_t count, CUstream s = nullptr);

  // The device ordinal a pointer belongs to; kInvalidArgument when the
  // pointer is not device memory the driver knows.
  static int pointer_device(CUdeviceptr p);

 private:
  void launch(CUfunction f, size_t count, void** args, CUstream s);

  int ordinal_;
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
  CUstream copy_in_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction divide_[static_cast<int>(DType::kCount)] = {};
  CUfunction bool_normalize_ = nullptr;
};

// Makes a context current on this thread and restores the previous one.
class ScopedContext {
 public:
  explicit ScopedContext(CUcontext ctx);
  ~ScopedContext();
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

 private:
  CUcontext prev_ = nullptr;
};

// The cadence of every GPU poll (CUDA's blocking waits and NCCL have no
// timeout): yields for 100 us after `since` (most copies and small
// collectives end by then), then sleeps in 20 us ticks.
void poll_pause(TimePoint since);

// Poll until `event` has completed; kTimeout past `deadline` (`what` names
// the step). Polls briefly, then sleeps in short ticks: CUDA's blocking
// waits have no timeout.
void wait_event(CUevent event, TimePoint deadline, const char* what);

// RAII event (created with CU_EVENT_DISABLE_TIMING).
class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  CUevent get() const { return e_; }
  void record(CUstream s);

 private:
  CUevent e_ = nullptr;
};

}  // namespace pytfcomm::gpu
