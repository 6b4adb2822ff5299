// pytfcomm's kernels, one class template per op on the device (TF's custom-op
// Functor<Device> pattern). The class reads the attrs, checks the arguments,
// takes the local-only shortcut and allocates what every device allocates
// alike; the device's functor (tf/kernel_base.h) moves the data and calls
// done(). A device's source specializes the functors, then registers
// Op<Device>: allreduce_kernel.cc and gather_kernels.cc for CPU, gpu_kernels.cc
// for GPU (PYTFCOMM_TF_GPU).
#pragma once

#include <memory>
#include <utility>

#include "local/local_reduce.h"
#include "tf/kernel_base.h"

namespace pytfcomm {
namespace tf {

// PytfcommAllReduce.
template <typename Device>
class AllReduceOp : public CommKernel {
 public:
  explicit AllReduceOp(OpKernelConstruction* c) : CommKernel(c) {
    OP_REQUIRES_OK(c, AllReduceFunctor<Device>::CheckAttrs(a_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    count(CounterKind::kAllReduceOps);
    AllReduceArgs args;
    OP_REQUIRES_OK_ASYNC(ctx, CheckAllReduce(ctx, a_, &args), done);
    // One replica on one device and no peers: nothing to combine.
    // (Any op of a single value, mean included, is that value.)
    if (a_.num_devices == 1 && a_.group_size == 1 && !args.cross) {
      ForwardInputs(ctx);
      return done();
    }
    AllReduceFunctor<Device>()(ctx, std::move(done), a_, std::move(args));
  }
};

// PytfcommBroadcast. With no other process taking part (no communicator, a
// job of one, an empty tensor) every output is the input.
template <typename Device>
class BroadcastOp : public CommKernel {
 public:
  using CommKernel::CommKernel;

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    using Functor = BroadcastFunctor<Device>;
    count(CounterKind::kBroadcastOps);
    BroadcastArgs args;
    OP_REQUIRES_OK_ASYNC(ctx, OpComm(a_, &args.comm), done);
    const Tensor& in = ctx->input(0);
    if (!args.comm || args.comm->size() == 1 || in.NumElements() == 0) {
      for (int i = 0; i < a_.num_devices; ++i) ctx->set_output(i, in);
      return done();
    }
    OP_REQUIRES_OK_ASYNC(ctx, CheckBroadcast(ctx, a_, &args), done);
    args.in = in;
    OP_REQUIRES_OK_ASYNC(
        ctx, AllocateSharedOutput(ctx, a_, Functor::kOutput, in.dtype(), in.shape(), &args.out),
        done);
    Functor()(ctx, std::move(done), a_, std::move(args));
  }
};

// PytfcommAllGather. The functor gets no communicator when no other process
// takes part.
template <typename Device>
class AllGatherOp : public CommKernel {
 public:
  using CommKernel::CommKernel;

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    count(CounterKind::kAllGatherOps);
    AllGatherArgs args;
    OP_REQUIRES_OK_ASYNC(ctx, OpComm(a_, &args.comm), done);
    if (args.comm && args.comm->size() == 1) args.comm.reset();
    OP_REQUIRES_OK_ASYNC(ctx, CheckAllGather(ctx, a_, &args), done);
    AllGatherFunctor<Device>()(ctx, std::move(done), a_, std::move(args));
  }
};

}  // namespace tf
}  // namespace pytfcomm
