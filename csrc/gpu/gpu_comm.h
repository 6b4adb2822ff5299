// Collectives on GPU memory (DLPack tensors) for one pytfcomm communicator,
// synchronous like the NumPy API: the TF kernels' stream path plus a wait.
// Each call is one member on pytfcomm's stream of the tensor's device, run
// by gpu/gpu_collective.h (NCCL through the engine, or staged through
// pinned host memory in a pipeline of chunks, gpu/staging.h), and returns
// once the result is in place.
//
// Created by the bindings on the first GPU tensor a communicator sees; the
// device it binds to is that tensor's.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "common/clock.h"
#include "common/dtype.h"
#include "engine/communicator.h"
#include "gpu/gpu_params.h"
#include "gpu/stream_collectives.h"

namespace pytfcomm::gpu {

class Clique;
class Device;
class Stager;

// A contiguous tensor in device memory (from DLPack).
struct DeviceBuffer {
  uint64_t ptr = 0;  // CUdeviceptr
  size_t count = 0;  // elements
  DType dtype = DType::kFloat32;
  int device = 0;  // CUDA ordinal
};

class GpuCommunicator {
 public:
  explicit GpuCommunicator(std::shared_ptr<Communicator> comm);
  ~GpuCommunicator();
  GpuCommunicator(const GpuCommunicator&) = delete;
  GpuCommunicator& operator=(const GpuCommunicator&) = delete;

  // The CUDA stream pytfcomm runs on for `device`, as an integer for
  // `__dlpack__(stream=...)`; sets up the device on first use.
  uintptr_t stream(int device);

  void allreduce(const DeviceBuffer& in, const DeviceBuffer& out, ReduceOp op, Algorithm algorithm,
                 Backend backend, double timeout_s, uint32_t shape_tag);
  // The root's `in` lands in every rank's `out` (in == out allowed).
  void broadcast(const DeviceBuffer& in, const DeviceBuffer& out, int root, Backend backend,
                 double timeout_s, uint32_t shape_tag);
  void allgather(const DeviceBuffer& in, const DeviceBuffer& out, Backend backend, double timeout_s,
                 uint32_t shape_tag);
  void reduce_scatter(const DeviceBuffer& in, const DeviceBuffer& out, ReduceOp op, Backend backend,
                      double timeout_s, uint32_t shape_tag);

  // "nccl" or "staged": what the last collective used ("" before any).
  std::string last_backend() const;
  // NCCL calls confirmed by the compact check, and those that took the
  // full round first (gpu/verify_cache.h); both 0 before the first.
  std::pair<uint64_t, uint64_t> verify_stats() const;
  // Release NCCL, streams and pinned memory (idempotent). NCCL is aborted
  // (ncclCommAbort) when the communicator failed, else finalized and destroyed.
  void close();

 private:
  struct Call {
    StreamOp op;
    ReduceOp reduce = ReduceOp::kSum;
    Algorithm algorithm = Algorithm::kAuto;
    int root = 0;
    Backend backend;
    double timeout_s;
    uint32_t shape_tag;
  };
  // The staged body: the stager, the device, the deadline, and the shape
  // tag of its chunks (the call's digest: the first chunk checks it).
  using Staged = std::function<void(Stager&, Device&, TimePoint, uint32_t)>;
  void run(const Call& call, const DeviceBuffer& in, const DeviceBuffer& out, const Staged& staged);
  Clique& clique_for(int ordinal);
  // Throws kClosed (CommClosedError) once closed, naming an earlier failure.
  void check_open() const;

  std::shared_ptr<Communicator> comm_;
  mutable std::mutex mu_;
  std::shared_ptr<Clique> clique_;  // the device and NCCL
  std::unique_ptr<Stager> stager_;
  std::string failure_;  // why this object was closed by an error
  bool closed_ = false;
  Backend last_ = Backend::kAuto;
};

}  // namespace pytfcomm::gpu
