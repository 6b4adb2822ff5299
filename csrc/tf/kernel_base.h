// The bases of pytfcomm's kernels. What a CPU and a GPU kernel of one op
// share (attrs, argument checks, the local-only shortcut) is written once
// here; the kernels implement only what differs by device.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tf/op_attrs.h"
#include "tf/tf_common.h"

namespace pytfcomm {
namespace tf {

// Every pytfcomm kernel: the op's attrs, read at construction.
class CommKernel : public AsyncOpKernel {
 public:
  explicit CommKernel(OpKernelConstruction* c) : AsyncOpKernel(c) { ReadOpAttrs(c, &a_); }

 protected:
  OpAttrs a_;
};

// The device kernels below derive from these and override the private hook
// (their inherited constructor stays public, as the base's).

// PytfcommBroadcast. With no other process taking part (no communicator, a
// job of one, an empty tensor) every output is the input; otherwise the
// dtype and the root (below the job's size) are checked before Send().
class BroadcastKernel : public CommKernel {
 public:
  using CommKernel::CommKernel;

 private:
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) final;
  // The broadcast across `comm`'s processes; sets the outputs, calls done().
  virtual void Send(OpKernelContext* ctx, DoneCallback done, std::shared_ptr<Communicator> comm,
                    DType dt) = 0;
};

// PytfcommAllGather. Inputs 0..num_devices-1 must each be of rank >= 1 and
// of one shape after dimension 0 before Gather().
class AllGatherKernel : public CommKernel {
 public:
  using CommKernel::CommKernel;

 protected:
  // The inputs' shapes: `row` after dimension 0, and each replica's dimension 0.
  struct Rows {
    TensorShape row;
    std::vector<int64_t> counts;
  };

 private:
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) final;
  // The all-gather; `comm` is null when no other process takes part. Sets
  // the outputs, calls done().
  virtual void Gather(OpKernelContext* ctx, DoneCallback done, std::shared_ptr<Communicator> comm,
                      DType dt, const Rows& rows) = 0;
};

}  // namespace tf
}  // namespace pytfcomm
