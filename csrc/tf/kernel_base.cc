#include "tf/kernel_base.h"

#include <string>
#include <utility>

#include "local/local_reduce.h"

namespace pytfcomm {
namespace tf {

void BroadcastKernel::ComputeAsync(OpKernelContext* ctx, DoneCallback done) {
  count(CounterKind::kBroadcastOps);
  std::shared_ptr<Communicator> comm;
  OP_REQUIRES_OK_ASYNC(ctx, OpComm(a_, &comm), done);
  const Tensor& in = ctx->input(0);
  if (!comm || comm->size() == 1 || in.NumElements() == 0) {
    for (int i = 0; i < a_.num_devices; ++i) ctx->set_output(i, in);
    return done();
  }
  DType dt;
  OP_REQUIRES_OK_ASYNC(ctx, CoreDType(in, "broadcast", &dt), done);
  OP_REQUIRES_ASYNC(
      ctx, a_.root < comm->size(),
      absl::InvalidArgumentError("pytfcomm broadcast: root_rank " + std::to_string(a_.root) +
                                 " is not below size " + std::to_string(comm->size())),
      done);
  Send(ctx, std::move(done), std::move(comm), dt);
}

void AllGatherKernel::ComputeAsync(OpKernelContext* ctx, DoneCallback done) {
  count(CounterKind::kAllGatherOps);
  std::shared_ptr<Communicator> comm;
  OP_REQUIRES_OK_ASYNC(ctx, OpComm(a_, &comm), done);
  if (comm && comm->size() == 1) comm.reset();
  const Tensor& t0 = ctx->input(0);
  DType dt;
  OP_REQUIRES_OK_ASYNC(ctx, CoreDType(t0, "all-gather", &dt), done);
  OP_REQUIRES_ASYNC(ctx, t0.dims() >= 1,
                    absl::InvalidArgumentError("pytfcomm all-gather needs tensors of rank >= 1"),
                    done);
  Rows shapes;
  shapes.row = t0.shape();
  shapes.row.RemoveDim(0);
  shapes.counts.assign(static_cast<size_t>(a_.num_devices), 0);
  for (int i = 0; i < a_.num_devices; ++i) {
    const Tensor& t = ctx->input(i);
    TensorShape tail = t.shape();
    if (t.dims() >= 1) tail.RemoveDim(0);
    OP_REQUIRES_ASYNC(
        ctx, t.dims() >= 1 && tail == shapes.row,
        absl::InvalidArgumentError("pytfcomm all-gather: replica " + std::to_string(i) +
                                   " has shape " + t.shape().DebugString() + ", replica 0 has " +
                                   t0.shape().DebugString() + "; only dimension 0 may differ"),
        done);
    shapes.counts[static_cast<size_t>(i)] = t.dim_size(0);
  }
  Gather(ctx, std::move(done), std::move(comm), dt, shapes);
}

}  // namespace tf
}  // namespace pytfcomm
