// GPU kernels of pytfcomm's TF ops, built when the op library targets a
// CUDA TensorFlow (PYTFCOMM_TF_GPU, cmake/tensorflow.cmake): the GPU device
// parts of the kernels of tf/comm_kernels.h, which check the arguments as on
// CPU. They allocate the outputs with TF's GPU allocator and hand the device
// pointers and TF's CUDA stream to the core
// (gpu/stream_collectives.h), which enqueues NCCL on that stream and calls
// done() from its poller once the work has completed. No TF thread blocks
// and nothing synchronises the stream with the host on the NCCL path;
// errors and timeouts come back as the matching status (StatusOf()).
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
#include "tf/comm_kernels.h"
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
                           if (e) ctx->SetStatus(StatusOf(what, e));
                           done();
                         });
}

// The fields every call of an op takes from its attrs.
gpu::StreamCall MakeCall(gpu::StreamOp op, const OpAttrs& a, std::shared_ptr<Communicator> comm) {
  gpu::StreamCall call;
  call.op = op;
  call.comm = std::move(comm);
  call.comm_handle = a.comm_handle;
  call.timeout_s = a.core_timeout();
  return call;
}

}  // namespace

template <>
struct AllReduceFunctor<GPUDevice> {
  static absl::Status CheckAttrs(const OpAttrs& a) {
    if (a.num_devices != 1) {
      return absl::InvalidArgumentError(
          "pytfcomm: on GPUs every replica runs its own all-reduce op (num_devices = 1, "
          "group_size = number of GPUs); pytfcomm.tf builds them that way");
    }
    if (a.group_rank >= a.group_size) {
      return absl::InvalidArgumentError("pytfcomm: group_rank must be below group_size");
    }
    return absl::OkStatus();
  }

  void operator()(OpKernelContext* ctx, AsyncOpKernel::DoneCallback done, const OpAttrs& a,
                  AllReduceArgs args) const {
    std::vector<gpu::StreamTensor> tensors(static_cast<size_t>(ctx->num_inputs()));
    for (int j = 0; j < ctx->num_inputs(); ++j) {
      const Tensor& in = ctx->input(j);
      Tensor* out = nullptr;
      // NCCL reduces in place when TF lets the output take the input's buffer.
      OP_REQUIRES_OK_ASYNC(ctx, ctx->forward_input_or_allocate_output({j}, j, in.shape(), &out),
                           done);
      tensors[j] = {DevicePtr(in), DevicePtr(*out), static_cast<size_t>(in.NumElements()),
                    args.dtypes[static_cast<size_t>(j)]};
    }
    gpu::StreamCall call =
        MakeCall(gpu::StreamOp::kAllReduce, a, args.cross ? std::move(args.comm) : nullptr);
    call.reduce = a.op;
    call.algorithm = a.algorithm;
    call.group_size = a.group_size;
    call.group_rank = a.group_rank;
    call.group_key = a.group_key;
    Enqueue(ctx, std::move(done), "GPU all-reduce", std::move(call), std::move(tensors));
  }
};

template <>
struct BroadcastFunctor<GPUDevice> {
  static constexpr SharedOutput kOutput = SharedOutput::kOpDevice;

  void operator()(OpKernelContext* ctx, AsyncOpKernel::DoneCallback done, const OpAttrs& a,
                  BroadcastArgs args) const {
    gpu::StreamTensor t{DevicePtr(args.in), DevicePtr(args.out),
                        static_cast<size_t>(args.in.NumElements()), args.dtype};
    gpu::StreamCall call = MakeCall(gpu::StreamOp::kBroadcast, a, std::move(args.comm));
    call.root = a.root;
    Enqueue(ctx, std::move(done), "GPU broadcast", std::move(call), {t});
  }
};

template <>
struct AllGatherFunctor<GPUDevice> {
  void operator()(OpKernelContext* ctx, AsyncOpKernel::DoneCallback done, const OpAttrs& a,
                  AllGatherArgs args) const {
    std::vector<gpu::StreamTensor> pieces;
    for (int i = 0; i < a.num_devices; ++i) {
      const Tensor& t = ctx->input(i);
      pieces.push_back({DevicePtr(t), 0, static_cast<size_t>(t.NumElements()), args.dtype});
    }
    // Every process must contribute the same shape (NCCL gathers equal
    // counts); the core's metadata check reports a mismatch on every rank.
    TensorShape shape = args.row;
    shape.InsertDim(0, args.rows * (args.comm ? args.comm->size() : 1));
    Tensor out;
    OP_REQUIRES_OK_ASYNC(
        ctx,
        AllocateSharedOutput(ctx, a, SharedOutput::kOpDevice, ctx->input(0).dtype(), shape, &out),
        done);
    if (out.NumElements() == 0) return done();
    pieces[0].out = DevicePtr(out);
    Enqueue(ctx, std::move(done), "GPU all-gather",
            MakeCall(gpu::StreamOp::kAllGather, a, std::move(args.comm)), std::move(pieces));
  }
};

REGISTER_KERNEL_BUILDER(Name("PytfcommAllReduce").Device(tensorflow::DEVICE_GPU),
                        AllReduceOp<GPUDevice>);
REGISTER_KERNEL_BUILDER(Name("PytfcommBroadcast").Device(tensorflow::DEVICE_GPU),
                        BroadcastOp<GPUDevice>);
REGISTER_KERNEL_BUILDER(Name("PytfcommAllGather").Device(tensorflow::DEVICE_GPU),
                        AllGatherOp<GPUDevice>);

}  // namespace tf
}  // namespace pytfcomm
