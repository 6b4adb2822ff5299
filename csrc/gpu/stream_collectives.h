// Collectives enqueued on the caller's CUDA stream and completed
// asynchronously: the core of the TF op library's GPU kernels
// (csrc/tf/gpu_kernels.cc). No CUDA header here, so the op library compiles
// with TF's flags alone.
//
// A kernel passes its tensors' device pointers and TensorFlow's CUDA stream
// of their device, and returns; `done` runs later on a pytfcomm thread.
// Nothing blocks a TF thread and nothing synchronises the stream with the
// host on the NCCL path:
//   1. members of a group (one op per local GPU, same group_key) meet in a
//      rendezvous; the last to arrive hands the group to the communicator's
//      executor thread (one FIFO per communicator: the order this process
//      issues collectives in, which every process shares);
//   2. that thread hands it to the engine as a collective of its own
//      (gpu/gpu_collective.h: negotiated, ordered, timed and traced like a
//      CPU one); at its turn one NCCL group call over the group's clique
//      (gpu/clique.h) is enqueued on every member's stream (plus the mean's
//      division), and a CUDA event recorded on each stream;
//   3. the poller (gpu/event_poller.h) calls each member's done() when its
//      event completes, or with the error when NCCL fails or the deadline
//      passes (NCCL is then aborted and the communicator closed).
// Without NCCL the executor thread stages through pinned host memory and
// the CPU path (local combine, then the communicator's collective).
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <vector>

#include "common/dtype.h"
#include "engine/communicator.h"

namespace pytfcomm::gpu {

// kReduceScatter: the DLPack path's (gpu/gpu_comm.h); the TF kernels have none.
enum class StreamOp : uint8_t {
  kAllReduce = 0,
  kBroadcast = 1,
  kAllGather = 2,
  kReduceScatter = 3
};

// One tensor of a member, in device memory of the stream's GPU.
struct StreamTensor {
  uint64_t in = 0;   // CUdeviceptr
  uint64_t out = 0;  // CUdeviceptr; may equal `in` (all-reduce, broadcast)
  size_t count = 0;  // elements of `in`
  DType dtype = DType::kFloat32;
};

struct StreamCall {
  StreamOp op = StreamOp::kAllReduce;
  ReduceOp reduce = ReduceOp::kSum;
  Algorithm algorithm = Algorithm::kAuto;  // of the staged cross-process step
  std::shared_ptr<Communicator> comm;      // null: no other process
  int64_t comm_handle = 0;
  // All-reduce only: `group_size` local GPUs run it together, one op each,
  // all with the same `group_key`; this op is member `group_rank`.
  int group_size = 1;
  int group_rank = 0;
  int64_t group_key = 0;
  int root = 0;           // broadcast: the process that sends
  double timeout_s = -1;  // <= 0: PYTFCOMM_TIMEOUT
};

// Called exactly once: null when the outputs are complete on the stream.
using StreamDone = std::function<void(std::exception_ptr error)>;

// Enqueues `call` on `cu_stream` (a CUstream) and returns at once; errors,
// argument errors included, reach `done` (which may run before this
// returns). Layouts:
//   all-reduce: every tensor's `in` reduced over the group and the
//     processes into its `out`;
//   broadcast: one tensor; the root process's `in` lands in every `out`;
//   all-gather: the tensors are pieces concatenated in order, then across
//     processes in rank order, into tensors[0].out (the other `out`s are
//     ignored); every process must contribute the same number of elements.
void enqueue_on_stream(void* cu_stream, StreamCall call, std::vector<StreamTensor> tensors,
                       StreamDone done) noexcept;

}  // namespace pytfcomm::gpu
