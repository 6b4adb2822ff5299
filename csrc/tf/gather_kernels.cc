// PytfcommBroadcast and PytfcommAllGather on CPU. Locally both hand every
// replica the same Tensor (zero copy); with a communicator the
// cross-process step runs on the communicator's executor thread.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/local_pool.h"
#include "engine/local_reduce.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tf/cross_worker.h"
#include "tf/output_buffer.h"
#include "tf/tf_common.h"

namespace pytfcomm {
namespace tf {
namespace {

using tensorflow::AsyncOpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

class BroadcastOp : public AsyncOpKernel {
 public:
  explicit BroadcastOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
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
    DType dt;
    OP_REQUIRES_OK_ASYNC(ctx, CheckBroadcast(in, *comm, a_.root, &dt), done);
    Tensor out;
    OP_REQUIRES_OK_ASYNC(ctx, AllocateOutputBuffer(ctx, in.dtype(), in.shape(), &out), done);
    // Inputs are immutable: the root sends from a copy that becomes its output.
    if (comm->rank() == a_.root) std::memcpy(out.data(), in.data(), in.TotalBytes());
    for (int i = 0; i < a_.num_devices; ++i) ctx->set_output(i, out);
    char* buf = const_cast<char*>(out.tensor_data().data());
    std::vector<std::unique_ptr<Request>> reqs;
    reqs.push_back(comm->make_request(algorithms::CollectiveKind::kBroadcast, buf, buf,
                                      static_cast<size_t>(out.NumElements()), dt, ReduceOp::kSum,
                                      Algorithm::kAuto, a_.root, CoreTimeout(a_.timeout), 0));
    SubmitCrossWorker(ctx, std::move(done), "cross-worker broadcast", *comm,
                      InstanceStream(ctx, a_.instance_key), OpLabel("broadcast", ctx),
                      std::move(reqs), [comm, out] { count(CounterKind::kCrossWorkerOps); });
  }

 private:
  GatherAttrs a_;
};

class AllGatherOp : public AsyncOpKernel {
 public:
  explicit AllGatherOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    ReadGatherAttrs(c, false, &a_);
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    count(CounterKind::kAllGatherOps);
    const int n = a_.num_devices;
    std::shared_ptr<Communicator> comm;
    if (a_.comm_handle > 0) OP_REQUIRES_OK_ASYNC(ctx, FindComm(a_.comm_handle, &comm), done);
    const bool cross = comm && comm->size() > 1;
    const Tensor& t0 = ctx->input(0);
    TensorShape row;
    std::vector<int64_t> counts;
    OP_REQUIRES_OK_ASYNC(ctx, GatherRows(ctx, n, &row, &counts), done);
    std::vector<int64_t> offsets(n);  // each replica's first row
    int64_t rows = 0;
    for (int i = 0; i < n; ++i) {
      offsets[i] = rows;
      rows += counts[i];
    }
    TensorShape local_shape = row;
    local_shape.InsertDim(0, rows);
    Tensor local;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_temp(t0.dtype(), local_shape, &local), done);
    const int64_t row_bytes = rows ? static_cast<int64_t>(local.TotalBytes()) / rows : 0;
    char* base = const_cast<char*>(local.tensor_data().data());
    parallel_for(n, [&](size_t i) {
      const Tensor& t = ctx->input(static_cast<int>(i));
      std::memcpy(base + offsets[i] * row_bytes, t.tensor_data().data(), t.TotalBytes());
    });
    if (!cross) {
      for (int i = 0; i < n; ++i) ctx->set_output(i, local);
      return done();
    }
    DType dt;
    OP_REQUIRES_ASYNC(ctx, ToDType(t0.dtype(), &dt),
                      absl::InvalidArgumentError("pytfcomm all-gather: unsupported dtype"), done);
    // Every process must contribute the same shape (the core's all-gather
    // moves equal counts); a mismatch is reported by the core on every rank.
    TensorShape global_shape = row;
    global_shape.InsertDim(0, rows * comm->size());
    Tensor global;
    OP_REQUIRES_OK_ASYNC(ctx, AllocateOutputBuffer(ctx, t0.dtype(), global_shape, &global), done);
    for (int i = 0; i < n; ++i) ctx->set_output(i, global);
    std::vector<std::unique_ptr<Request>> reqs;
    reqs.push_back(comm->make_request(
        algorithms::CollectiveKind::kAllgather, local.tensor_data().data(),
        const_cast<char*>(global.tensor_data().data()), static_cast<size_t>(local.NumElements()),
        dt, ReduceOp::kSum, Algorithm::kAuto, 0, CoreTimeout(a_.timeout), 0));
    SubmitCrossWorker(ctx, std::move(done), "cross-worker all-gather", *comm,
                      InstanceStream(ctx, a_.instance_key), OpLabel("allgather", ctx),
                      std::move(reqs),
                      [comm, local, global] { count(CounterKind::kCrossWorkerOps); });
  }

 private:
  GatherAttrs a_;
};

REGISTER_KERNEL_BUILDER(Name("PytfcommBroadcast").Device(tensorflow::DEVICE_CPU), BroadcastOp);
REGISTER_KERNEL_BUILDER(Name("PytfcommAllGather").Device(tensorflow::DEVICE_CPU), AllGatherOp);

}  // namespace
}  // namespace tf
}  // namespace pytfcomm
