// NCCL communicators for one pytfcomm communicator: the world, and for the
// hierarchical all-reduce the ranks of this host and the ranks with the same
// local index on every host. Bootstrapped through pytfcomm's own (TCP,
// authenticated) communicator: ncclUniqueIds travel over it, so NCCL needs
// no rendezvous of its own.
//
// Communicators are non-blocking (ncclConfig_t.blocking = 0) because NCCL has
// no timeout: every wait here polls ncclCommGetAsyncError and a CUDA event
// against pytfcomm's deadline, and on an error or at the deadline every
// communicator is aborted (ncclCommAbort) so no rank hangs.
#pragma once

#include <nccl.h>

#include <cstddef>
#include <string>

#include "algorithms/collective.h"
#include "common/clock.h"
#include "common/dtype.h"
#include "gpu/device.h"

namespace pytfcomm {
class Communicator;
}

namespace pytfcomm::gpu {

class NcclComms {
 public:
  // Collective over `boot`: every rank must construct at the same point.
  NcclComms(Communicator& boot, Device& device, TimePoint deadline);
  ~NcclComms();  // finalize + destroy, or abort when something failed
  NcclComms(const NcclComms&) = delete;
  NcclComms& operator=(const NcclComms&) = delete;

  // op: sum, min, max or prod (mean is a sum and a division, done by the
  // caller); dtype bool is reduced as uint8. Every call enqueues on the
  // device's stream and returns once the result is in place.
  void allreduce(CUdeviceptr in, CUdeviceptr out, size_t count, DType dtype, ReduceOp op,
                 TimePoint deadline);
  // Reduce-scatter within the host, all-reduce across hosts, all-gather
  // within the host (plus a plain all-reduce of the count % local_size tail).
  void hierarchical_allreduce(CUdeviceptr in, CUdeviceptr out, size_t count, DType dtype,
                              ReduceOp op, TimePoint deadline);
  void broadcast(CUdeviceptr buf, size_t count, DType dtype, int root, TimePoint deadline);
  void allgather(CUdeviceptr in, CUdeviceptr out, size_t count, DType dtype, TimePoint deadline);
  void reduce_scatter(CUdeviceptr in, CUdeviceptr out, size_t count_out, DType dtype, ReduceOp op,
                      TimePoint deadline);

  // Wait for everything enqueued on the device's stream (NCCL and kernels).
  void wait(TimePoint deadline, const char* what);

  // Abort every communicator (never throws); later calls fail.
  void abort() noexcept;

 private:
  ncclComm_t init_comm(const ncclUniqueId& id, int nranks, int rank, TimePoint deadline,
                       const char* which);
  void init_hierarchy(TimePoint deadline);
  // Check what an NCCL call returned; in non-blocking mode ncclInProgress
  // means "still being enqueued": poll until it settles.
  void settle(ncclComm_t comm, ncclResult_t r, const char* call, TimePoint deadline);
  [[noreturn]] void fail(ncclComm_t comm, ncclResult_t r, const char* call);

  Communicator& boot_;
  Device& device_;
  algorithms::Group local_, cross_;
  bool uniform_ = false;
  ncclComm_t world_ = nullptr;
  ncclComm_t local_comm_ = nullptr;
  ncclComm_t cross_comm_ = nullptr;
  bool failed_ = false;
  Event done_;
};

}  // namespace pytfcomm::gpu
