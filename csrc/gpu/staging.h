// GPU buffers over the host transports (TCP, shared memory), for clusters
// without GPU-direct networking or without NCCL: data is staged through
// pinned host memory in chunks, pipelined so that copying chunk i+1 out of
// the GPU and chunk i-1 back in overlap with the host collective on chunk i.
// The host collectives are the CPU path's own (same algorithms, metadata
// checks, deadlines); each chunk is one collective.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <functional>
#include <memory>

#include "common/clock.h"
#include "common/dtype.h"
#include "engine/communicator.h"
#include "gpu/device.h"

namespace pytfcomm::gpu {

class Stager {
 public:
  Stager(Device& device, size_t chunk_bytes);
  ~Stager();
  Stager(const Stager&) = delete;
  Stager& operator=(const Stager&) = delete;

  void allreduce(Communicator& c, CUdeviceptr in, CUdeviceptr out, size_t count, DType dtype,
                 ReduceOp op, Algorithm algorithm, TimePoint deadline, uint32_t shape_tag);
  void broadcast(Communicator& c, CUdeviceptr buf, size_t count, DType dtype, int root,
                 TimePoint deadline, uint32_t shape_tag);
  void allgather(Communicator& c, CUdeviceptr in, CUdeviceptr out, size_t count, DType dtype,
                 TimePoint deadline, uint32_t shape_tag);
  // count: elements of `in`; `out` gets count / size.
  void reduce_scatter(Communicator& c, CUdeviceptr in, CUdeviceptr out, size_t count, DType dtype,
                      ReduceOp op, TimePoint deadline, uint32_t shape_tag);

 private:
  // The pipeline: for chunk i in [0, n): copy_out(i, host) is enqueued on
  // the device's stream, host_step(i, host) runs once it has landed, and
  // copy_in(i, host) is enqueued on the copy-in stream. Two host buffers
  // alternate; a buffer is reused only after its copy-in finished.
  void pipeline(size_t chunks, TimePoint deadline,
                const std::function<void(size_t, char*)>& copy_out,
                const std::function<void(size_t, char*)>& host_step,
                const std::function<void(size_t, char*)>& copy_in);

  Device& device_;
  size_t chunk_bytes_;
  char* host_[2] = {nullptr, nullptr};  // pinned, chunk_bytes_ each
  Event out_done_[2];
  Event in_done_[2];
  Event ready_;
};

// Pinned host memory for the staged path of the TF GPU kernels
// (stream_collectives.cc), which stages whole tensors: cuMemHostAlloc costs
// milliseconds per MiB, so released blocks are kept by size class (powers
// of two) for the next step, up to 256 MiB idle. A context must be current.
// The block returns to the pool when the last reference drops.
std::shared_ptr<char> pinned_block(size_t bytes);

}  // namespace pytfcomm::gpu
