// One collective as a stream work item (one job: the exchange protocol).
//
// Each rank's work item, on its stream's thread: post a descriptor (kind,
// count, type, op, root) for its sequence number; barrier; compare every
// rank's descriptor (any difference fails every rank: ncclInvalidUsage);
// then, chunk by chunk through a bounded per-rank slot, post its data,
// barrier, combine what all ranks posted. Slots and descriptors are double
// buffered by barrier-step parity, so one barrier per step suffices: a rank
// writes step s's buffer only after every rank passed step s-1, that is
// finished reading step s-2's. Waits spin briefly, then sleep in short
// ticks, and end within a tick of ncclCommAbort/Destroy.
#pragma once

#include <cuda.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "nccl/comm.h"

namespace ptcsi_nccl {

enum class Kind : int32_t { kAllReduce = 1, kReduceScatter = 2, kAllGather = 3, kBroadcast = 4 };
const char* kind_name(Kind k);

struct Work {
  std::shared_ptr<Comm> comm;
  Kind kind;
  const void* send;
  void* recv;
  size_t count;  // per rank: recvcount (reduce-scatter), sendcount (all-gather)
  ncclDataType_t type;
  ncclRedOp_t op;
  int root;
  uint64_t call;  // 1-based number of this rank's collective (the fault knobs)
};

// What a failed work item returns to the stream (a sticky error, as a
// faulting kernel's): CUDA_ERROR_LAUNCH_FAILED.
constexpr CUresult kWorkFailed = CUDA_ERROR_LAUNCH_FAILED;

// ptcsi_work_fn and its release for a heap-allocated Work.
CUresult run_work(void* work);
void release_work(void* work);

}  // namespace ptcsi_nccl
