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
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tf/tf_common.h"
#include "tf/tf_gpu_stream.h"

namespace pytfcomm {
namespace tf {
namespace {

using tensorflow::AsyncOpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

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

class AllReduceGpuOp : public AsyncOpKernel {
 public:
  explicit AllReduceGpuOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    std::string op, alg;
    int num_devices = 1;
    OP_REQUIRES_OK(c, c->GetAttr("num_devices", &num_devices));
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &op));
    OP_REQUIRES_OK(c, c->GetAttr("comm_handle", &comm_handle_));
    OP_REQUIRES_OK(c, c->GetAttr("algorithm", &alg));
    OP_REQUIRES_OK(c, c->GetAttr("timeout_seconds", &timeout_));
    OP_REQUIRES_OK(c, c->GetAttr("group_size", &group_size_));
    OP_REQUIRES_OK(c, c->GetAttr("group_rank", &group_rank_));
    OP_REQUIRES_OK(c, c->GetAttr("group_key", &group_key_));
    OP_REQUIRES(c, num_devices == 1,
                absl::InvalidArgumentError(
                    "pytfcomm: on GPUs every replica runs its own all-reduce op (num_devices = 1, "
                    "group_size = number of GPUs); pytfcomm.tf builds them that way"));
    OP_REQUIRES(c, group_rank_ < group_size_,
                absl::InvalidArgumentError("pytfcomm: group_rank must be below group_size"));
    op_ = ParseReduceOp(op);
    algorithm_ = ParseAlgorithm(alg);
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    count(CounterKind::kAllReduceOps);
    std::shared_ptr<Communicator> comm;
    if (comm_handle_ > 0) OP_REQUIRES_OK_ASYNC(ctx, FindComm(comm_handle_, &comm), done);
    const bool cross = comm && comm->size() > 1;
    std::vector<gpu::StreamTensor> tensors(static_cast<size_t>(ctx->num_inputs()));
    for (int j = 0; j < ctx->num_inputs(); ++j) {
      const Tensor& in = ctx->input(j);
      OP_REQUIRES_ASYNC(ctx, ToDType(in.dtype(), &tensors[j].dtype),
                        absl::InvalidArgumentError("pytfcomm: unsupported dtype " +
                                                   tensorflow::DataTypeString(in.dtype())),
                        done);
      OP_REQUIRES_ASYNC(
          ctx, !(op_ == ReduceOp::kMean && in.dtype() == tensorflow::DT_BOOL),
          absl::InvalidArgumentError("pytfcomm: op 'mean' is not defined for bool; use 'max' "
                                     "(any) or 'min' (all)"),
          done);
    }
    // One GPU and no peers: nothing to combine.
    if (group_size_ == 1 && !cross) {
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
    call.reduce = op_;
    call.algorithm = algorithm_;
    call.comm = cross ? comm : nullptr;
    call.comm_handle = comm_handle_;
    call.group_size = group_size_;
    call.group_rank = group_rank_;
    call.group_key = group_key_;
    call.timeout_s = CoreTimeout(timeout_);
    Enqueue(ctx, std::move(done), "GPU all-reduce", std::move(call), std::move(tensors));
  }

 private:
  ReduceOp op_ = ReduceOp::kSum;
  Algorithm algorithm_ = Algorithm::kAuto;
  int64_t comm_handle_ = 0;
  float timeout_ = 0;
  int group_size_ = 1;
  int group_rank_ = 0;
  int64_t group_key_ = 0;
};

class BroadcastGpuOp : public AsyncOpKernel {
 public:
  explicit BroadcastGpuOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    ReadGatherAttrs(c, true, &a_);
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    count(CounterKind::kBroadcastOps);
    std::shared_ptr<Communicator> comm;
    if (a_.comm_handle > 0) OP_REQUIRES_OK_ASYNC(ctx, FindComm(a_.comm_handle, &comm), done);
    const Tensor& in = ctx->input(0);
    if (!comm || comm->size() == 1 || in.NumElements() == 0) {
      for (int i = 0; i < a_.num_devices; ++i) ctx->set_output(i, in);
      return done();
    }
    gpu::StreamTensor t;
    OP_REQUIRES_OK_ASYNC(ctx, CheckBroadcast(in, *comm, a_.root, &t.dtype), done);
    Tensor* out = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(0, in.shape(), &out), done);
    for (int i = 1; i < a_.num_devices; ++i) ctx->set_output(i, *out);
    t.in = DevicePtr(in);
    t.out = DevicePtr(*out);
    t.count = static_cast<size_t>(in.NumElements());
    gpu::StreamCall call;
    call.op = gpu::StreamOp::kBroadcast;
    call.comm = comm;
    call.comm_handle = a_.comm_handle;
    call.root = a_.root;
    call.timeout_s = CoreTimeout(a_.timeout);
    Enqueue(ctx, std::move(done), "GPU broadcast", std::move(call), {t});
  }

 private:
  GatherAttrs a_;
};

class AllGatherGpuOp : public AsyncOpKernel {
 public:
  explicit AllGatherGpuOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    ReadGatherAttrs(c, false, &a_);
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    count(CounterKind::kAllGatherOps);
    std::shared_ptr<Communicator> comm;
    if (a_.comm_handle > 0) OP_REQUIRES_OK_ASYNC(ctx, FindComm(a_.comm_handle, &comm), done);
    const bool cross = comm && comm->size() > 1;
    TensorShape row;
    std::vector<int64_t> counts;
    OP_REQUIRES_OK_ASYNC(ctx, GatherRows(ctx, a_.num_devices, &row, &counts), done);
    DType dt;
    OP_REQUIRES_ASYNC(ctx, ToDType(ctx->input(0).dtype(), &dt),
                      absl::InvalidArgumentError("pytfcomm all-gather: unsupported dtype"), done);
    int64_t rows = 0;
    std::vector<gpu::StreamTensor> pieces;
    for (int i = 0; i < a_.num_devices; ++i) {
      const Tensor& t = ctx->input(i);
      rows += counts[static_cast<size_t>(i)];
      pieces.push_back({DevicePtr(t), 0, static_cast<size_t>(t.NumElements()), dt});
    }
    // Every process must contribute the same shape (NCCL gathers equal
    // counts); the core's metadata check reports a mismatch on every rank.
    TensorShape shape = row;
    shape.InsertDim(0, rows * (cross ? comm->size() : 1));
    Tensor* out = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(0, shape, &out), done);
    for (int i = 1; i < a_.num_devices; ++i) ctx->set_output(i, *out);
    if (out->NumElements() == 0) return done();
    pieces[0].out = DevicePtr(*out);
    gpu::StreamCall call;
    call.op = gpu::StreamOp::kAllGather;
    call.comm = cross ? comm : nullptr;
    call.comm_handle = a_.comm_handle;
    call.timeout_s = CoreTimeout(a_.timeout);
    Enqueue(ctx, std::move(done), "GPU all-gather", std::move(call), std::move(pieces));
  }

 private:
  GatherAttrs a_;
};

REGISTER_KERNEL_BUILDER(Name("PytfcommAllReduce").Device(tensorflow::DEVICE_GPU), AllReduceGpuOp);
REGISTER_KERNEL_BUILDER(Name("PytfcommBroadcast").Device(tensorflow::DEVICE_GPU), BroadcastGpuOp);
REGISTER_KERNEL_BUILDER(Name("PytfcommAllGather").Device(tensorflow::DEVICE_GPU), AllGatherGpuOp);

}  // namespace
}  // namespace tf
}  // namespace pytfcomm
