// Collectives on GPU memory for one pytfcomm communicator: NCCL when every
// rank has it (or when asked), otherwise staged through pinned host memory
// over the communicator's own TCP/shared-memory transport. The TCP
// communicator bootstraps NCCL and, before each GPU collective, checks that
// every rank called the same one (NCCL itself would hang or corrupt data).
//
// Created by the bindings on the first GPU tensor a communicator sees; the
// device it binds to is that tensor's.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "common/clock.h"
#include "common/dtype.h"
#include "engine/communicator.h"
#include "gpu/gpu_params.h"

namespace pytfcomm::gpu {

class Device;
class NcclComms;
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
  // Release NCCL, streams and pinned memory (idempotent).
  void close();

 private:
  template <typename Body>
  void run(const char* name, int kind, const DeviceBuffer& in, ReduceOp op, int root, int algorithm,
           Backend backend, double timeout_s, uint32_t shape_tag, Body body);
  Device& device_for(int ordinal);
  Backend resolve(Backend requested, TimePoint deadline);
  void verify(uint32_t digest, TimePoint deadline);

  std::shared_ptr<Communicator> comm_;
  mutable std::mutex mu_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<NcclComms> nccl_;
  std::unique_ptr<Stager> stager_;
  int nccl_everywhere_ = -1;  // -1: not asked yet; 0/1 once every rank said
  std::string nccl_missing_;  // which ranks lack NCCL, and why this one does
  std::string failure_;       // why this object was closed by an error
  bool closed_ = false;
  Backend last_ = Backend::kAuto;
};

}  // namespace pytfcomm::gpu
