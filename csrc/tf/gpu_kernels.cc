// GPU kernels of pytfcomm's TF ops, built when the op library targets a
// CUDA TensorFlow (PYTFCOMM_TF_GPU, cmake/tensorflow.cmake). Each kernel
// checks its arguments, allocates its outputs with TF's GPU allocator, and
// hands the device pointers and TF's CUDA stream to the core
// (gpu/stream_collectives.h), which enqueues NCCL on that stream and calls
// done() from its poller once the work has completed. No TF thread blocks
// and nothing synchronises the stream with the host on the NCCL path;
// errors and timeouts come back as the matching status (Guard()).
//
// All-reduce runs as a group: one op per local GPU (group_size ops with one
// group_key, built by pytfcomm.tf for MirroredStrategy), each with its own
// replica's M tensors (num_devices = 1); the M all-reduces of all GPUs are
// one NCCL group call, which NCCL aggregates, so there is no fusion buffer
// and no copy. Broadcast and all-gather keep the CPU ops' form: one op on
// one GPU (TF copies other GPUs' inputs to it).
#include <memory>
#include <string>
#include <vector>

#include "gpu/stream_collectives.h"
#include "local/local_reduce.h"
#include "tf/kernel_base.h"
#include "tf/tf_gpu_stream.h"

namespace pytfcomm {
namespace tf {
namespace {

uint64_t DevicePtr(const Tensor& t) { return reinterpret_cast<uint64_t>(t.tensor_data().data()); }

// Runs the call on TF's stream; the op's status and done() come from the
// core's completion callback (a pytfcomm thread).
void Enqueue(OpKernelContext* ctx, AsyncOpKernel::DoneCallback done, const char* what,
             gpu::StreamCall call, std::vector<gpu::StreamTensor> tensors) {
  void* stream = nullptr;
  OP_REQUIRES_OK_ASYNC(ctx, TfCudaStream(ctx, &stream), done);
  gpu::enqueue_on_stream(stream, std::move(call), std::move(tensors),
                         [ctx, done = std::move(done), what](std::exception_ptr e) {
                           if (e) ctx->SetStatus(Guard(what, [&] { std::rethrow_exception(e); }));
                           done();
                         });
}

class AllReduceGpuOp : public CommKernel {
 public:
  explicit AllReduceGpuOp(OpKernelConstruction* c) : CommKernel(c) {
    OP_REQUIRES(c, a_.num_devices == 1,
                absl::InvalidArgumentError(
                    "pytfcomm: on GPUs every replica runs its own all-reduce op (num_devices = 1, "
                    "group_size = number of GPUs); pytfcomm.tf builds them that way"));
    OP_REQUIRES(c, a_.group_rank < a_.group_size,
                absl::InvalidArgumentError("pytfcomm: group_rank must be below group_size"));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    count(CounterKind::kAllReduceOps);
    std::shared_ptr<Communicator> comm;
    OP_REQUIRES_OK_ASYNC(ctx, OpComm(a_, &comm), done);
    const bool cross = comm && comm->size() > 1;
    std::vector<gpu::StreamTensor> tensors(static_cast<size_t>(ctx->num_inputs()));
    for (int j = 0; j < ctx->num_inputs(); ++j) {
      OP_REQUIRES_OK_ASYNC(ctx, CoreDType(ctx->input(j), "all-reduce", &tensors[j].dtype, a_.op),
                           done);
    }
    // One GPU and no peers: nothing to combine.
    if (a_.group_size == 1 && !cross) {
      for (int j = 0; j < ctx->num_inputs(); ++j) ctx->set_output(j, ctx->input(j));
      return done();
    }
    for (int j = 0; j < ctx->num_inputs(); ++j) {
      const Tensor& in = ctx->input(j);
      Tensor* out = nullptr;
      // NCCL reduces in place when TF lets the output take the input's buffer.
      OP_REQUIRES_OK_ASYNC(ctx, ctx->forward_input_or_allocate_output({j}, j, in.shape(), &out),
                           done);
      tensors[j].in = DevicePtr(in);
      tensors[j].out = DevicePtr(*out);
      tensors[j].count = static_cast<size_t>(in.NumElements());
    }
    gpu::StreamCall call;
    call.op = gpu::StreamOp::kAllReduce;
    call.reduce = a_.op;
    call.algorithm = a_.algorithm;
    call.comm = cross ? comm : nullptr;
    call.comm_handle = a_.comm_handle;
    call.group_size = a_.group_size;
    call.group_rank = a_.group_rank;
    call.group_key = a_.group_key;
    call.timeout_s = a_.core_timeout();
    Enqueue(ctx, std::move(done), "GPU all-reduce", std::move(call), std::move(tensors));
  }
};

class BroadcastGpuOp : public BroadcastKernel {
  using BroadcastKernel::BroadcastKernel;

  void Send(OpKernelContext* ctx, DoneCallback done, std::shared_ptr<Communicator> comm,
            DType dt) override {
    const Tensor& in = ctx->input(0);
    Tensor* out = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(0, in.shape(), &out), done);
    for (int i = 1; i < a_.num_devices; ++i) ctx->set_output(i, *out);
    gpu::StreamCall call;
    call.op = gpu::StreamOp::kBroadcast;
    call.comm = comm;
    call.comm_handle = a_.comm_handle;
    call.root = a_.root;
    call.timeout_s = a_.core_timeout();
    gpu::StreamTensor t{DevicePtr(in), DevicePtr(*out), static_cast<size_t>(in.NumElements()), dt};
    Enqueue(ctx, std::move(done), "GPU broadcast", std::move(call), {t});
  }
};

class AllGatherGpuOp : public AllGatherKernel {
  using AllGatherKernel::AllGatherKernel;

  void Gather(OpKernelContext* ctx, DoneCallback done, std::shared_ptr<Communicator> comm, DType dt,
              const Rows& shapes) override {
    int64_t rows = 0;
    std::vector<gpu::StreamTensor> pieces;
    for (int i = 0; i < a_.num_devices; ++i) {
      const Tensor& t = ctx->input(i);
      rows += shapes.counts[static_cast<size_t>(i)];
      pieces.push_back({DevicePtr(t), 0, static_cast<size_t>(t.NumElements()), dt});
    }
    // Every process must contribute the same shape (NCCL gathers equal
    // counts); the core's metadata check reports a mismatch on every rank.
    TensorShape shape = shapes.row;
    shape.InsertDim(0, rows * (comm ? comm->size() : 1));
    Tensor* out = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(0, shape, &out), done);
    for (int i = 1; i < a_.num_devices; ++i) ctx->set_output(i, *out);
    if (out->NumElements() == 0) return done();
    pieces[0].out = DevicePtr(*out);
    gpu::StreamCall call;
    call.op = gpu::StreamOp::kAllGather;
    call.comm = comm;
    call.comm_handle = a_.comm_handle;
    call.timeout_s = a_.core_timeout();
    Enqueue(ctx, std::move(done), "GPU all-gather", std::move(call), std::move(pieces));
  }
};

REGISTER_KERNEL_BUILDER(Name("PytfcommAllReduce").Device(tensorflow::DEVICE_GPU), AllReduceGpuOp);
REGISTER_KERNEL_BUILDER(Name("PytfcommBroadcast").Device(tensorflow::DEVICE_GPU), BroadcastGpuOp);
REGISTER_KERNEL_BUILDER(Name("PytfcommAllGather").Device(tensorflow::DEVICE_GPU), AllGatherGpuOp);

}  // namespace
}  // namespace tf
}  // namespace pytfcomm
