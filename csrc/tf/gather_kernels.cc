// PytfcommBroadcast and PytfcommAllGather on CPU, the device parts of
// BroadcastOp and AllGatherOp (tf/comm_kernels.h). Locally both hand every
// replica the same Tensor (zero copy); with a communicator the
// cross-process step runs on the communicator's executor thread.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "local/local_pool.h"
#include "local/local_reduce.h"
#include "tf/comm_kernels.h"
#include "tf/cross_worker.h"

namespace pytfcomm {
namespace tf {

template <>
struct BroadcastFunctor<CPUDevice> {
  static constexpr SharedOutput kOutput = SharedOutput::kCachedHost;

  void operator()(OpKernelContext* ctx, AsyncOpKernel::DoneCallback done, const OpAttrs& a,
                  BroadcastArgs args) const {
    const std::shared_ptr<Communicator>& comm = args.comm;
    const Tensor& in = args.in;
    const Tensor& out = args.out;
    // Inputs are immutable: the root sends from a copy that becomes its output.
    char* buf = const_cast<char*>(out.tensor_data().data());
    if (comm->rank() == a.root) std::memcpy(buf, in.data(), in.TotalBytes());
    std::vector<std::unique_ptr<Request>> reqs;
    reqs.push_back(comm->make_request(
        algorithms::CollectiveKind::kBroadcast, buf, buf, static_cast<size_t>(out.NumElements()),
        args.dtype, ReduceOp::kSum, Algorithm::kAuto, a.root, a.core_timeout(), 0));
    SubmitCrossWorker(ctx, std::move(done), "cross-worker broadcast", *comm,
                      InstanceStream(ctx, a.instance_key), OpLabel("broadcast", ctx),
                      std::move(reqs), [comm, out] { count(CounterKind::kCrossWorkerOps); });
  }
};

template <>
struct AllGatherFunctor<CPUDevice> {
  void operator()(OpKernelContext* ctx, AsyncOpKernel::DoneCallback done, const OpAttrs& a,
                  AllGatherArgs args) const {
    const std::shared_ptr<Communicator>& comm = args.comm;
    const DType dt = args.dtype;
    const int n = a.num_devices;
    const TensorShape& row = args.row;
    const std::vector<int64_t>& counts = args.counts;
    const Tensor& t0 = ctx->input(0);
    std::vector<int64_t> offsets(n);  // each replica's first row
    const int64_t rows = args.rows;
    for (int i = 1; i < n; ++i) offsets[i] = offsets[i - 1] + counts[i - 1];
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
    if (!comm) {
      for (int i = 0; i < n; ++i) ctx->set_output(i, local);
      return done();
    }
    // Stage 1, the size exchange: every process's row count, tagged with the
    // dtype and the row shape, so processes that disagree on either fail
    // with a mismatch on every rank instead of gathering unrelated bytes.
    auto mine = std::make_shared<Tensor>();
    auto table = std::make_shared<Tensor>();
    OP_REQUIRES_OK_ASYNC(
        ctx, ctx->allocate_temp(tensorflow::DT_INT64, TensorShape({1}), mine.get()), done);
    OP_REQUIRES_OK_ASYNC(
        ctx, ctx->allocate_temp(tensorflow::DT_INT64, TensorShape({comm->size()}), table.get()),
        done);
    mine->flat<int64_t>()(0) = rows;
    std::vector<std::unique_ptr<Request>> reqs;
    reqs.push_back(comm->make_request(
        algorithms::CollectiveKind::kAllgather, mine->tensor_data().data(),
        const_cast<char*>(table->tensor_data().data()), 1, DType::kInt64, ReduceOp::kSum,
        Algorithm::kAuto, 0, a.core_timeout(), ShapeTag(t0.dtype(), row)));
    const uint64_t stream = InstanceStream(ctx, a.instance_key);
    const std::string label = OpLabel("allgather", ctx);
    auto gather = [&a, ctx, done, comm, local, table, row, stream, label, dt]() {
      if (!ctx->status().ok()) return done();
      GatherCounted(ctx, done, a, comm, local, *table, row, stream, label, dt);
    };
    SubmitCrossWorker(ctx, std::move(gather), "cross-worker all-gather (size exchange)", *comm,
                      stream, label, std::move(reqs), [mine, table] {});
  }

  // Stage 2, on the engine's thread once every process's row count is
  // known: the output takes the sum of them. Equal counts gather straight
  // into it; unequal ones gather blocks padded to the largest count, then
  // the padding is squeezed out (as TF's own collective all-gather does).
  static void GatherCounted(OpKernelContext* ctx, const AsyncOpKernel::DoneCallback& done,
                            const OpAttrs& a, std::shared_ptr<Communicator> comm,
                            const Tensor& local, const Tensor& table, const TensorShape& row,
                            uint64_t stream, const std::string& label, DType dt) {
    const int size = comm->size();
    auto counts = table.flat<int64_t>();
    int64_t total = 0, most = 0;
    for (int p = 0; p < size; ++p) {
      if (counts(p) < 0) {
        ctx->SetStatus(absl::InternalError("pytfcomm all-gather: a negative row count"));
        return done();
      }
      total += counts(p);
      most = std::max(most, counts(p));
    }
    TensorShape global_shape = row;
    global_shape.InsertDim(0, total);
    Tensor global;
    absl::Status st = AllocateSharedOutput(ctx, a, SharedOutput::kCachedHost, local.dtype(),
                                           global_shape, &global);
    if (!st.ok()) {
      ctx->SetStatus(st);
      return done();
    }
    const int64_t row_elems = row.num_elements();
    if (total == 0 || row_elems == 0) return done();
    const size_t es = static_cast<size_t>(tensorflow::DataTypeSize(local.dtype()));
    const size_t row_bytes = static_cast<size_t>(row_elems) * es;
    const double timeout = a.core_timeout();
    std::vector<std::unique_ptr<Request>> reqs;
    if (most * size == total) {  // every process the same
      reqs.push_back(comm->make_request(
          algorithms::CollectiveKind::kAllgather, local.tensor_data().data(),
          const_cast<char*>(global.tensor_data().data()), static_cast<size_t>(most * row_elems), dt,
          ReduceOp::kSum, Algorithm::kAuto, 0, timeout, 0));
      SubmitCrossWorker(ctx, done, "cross-worker all-gather", *comm, stream, label, std::move(reqs),
                        [comm, local, global] { count(CounterKind::kCrossWorkerOps); });
      return;
    }
    TensorShape padded_shape = row;
    padded_shape.InsertDim(0, most);
    Tensor padded_in, padded_out;
    st = ctx->allocate_temp(local.dtype(), padded_shape, &padded_in);
    padded_shape.set_dim(0, most * size);
    if (st.ok()) st = ctx->allocate_temp(local.dtype(), padded_shape, &padded_out);
    if (!st.ok()) {
      ctx->SetStatus(st);
      return done();
    }
    char* pin = const_cast<char*>(padded_in.tensor_data().data());
    std::memcpy(pin, local.tensor_data().data(), local.TotalBytes());
    std::memset(pin + local.TotalBytes(), 0, padded_in.TotalBytes() - local.TotalBytes());
    reqs.push_back(comm->make_request(algorithms::CollectiveKind::kAllgather, pin,
                                      const_cast<char*>(padded_out.tensor_data().data()),
                                      static_cast<size_t>(most * row_elems), dt, ReduceOp::kSum,
                                      Algorithm::kAuto, 0, timeout, 0));
    std::vector<int64_t> rows(counts.data(), counts.data() + size);
    auto squeeze = [comm, padded_in, padded_out, global, rows, most, row_bytes] {
      const char* src = padded_out.tensor_data().data();
      char* dst = const_cast<char*>(global.tensor_data().data());
      for (size_t p = 0; p < rows.size(); ++p) {
        const size_t n = static_cast<size_t>(rows[p]) * row_bytes;
        std::memcpy(dst, src + p * static_cast<size_t>(most) * row_bytes, n);
        dst += n;
      }
      count(CounterKind::kCrossWorkerOps);
    };
    SubmitCrossWorker(ctx, done, "cross-worker all-gather", *comm, stream, label, std::move(reqs),
                      std::move(squeeze));
  }
};

REGISTER_KERNEL_BUILDER(Name("PytfcommBroadcast").Device(tensorflow::DEVICE_CPU),
                        BroadcastOp<CPUDevice>);
REGISTER_KERNEL_BUILDER(Name("PytfcommAllGather").Device(tensorflow::DEVICE_CPU),
                        AllGatherOp<CPUDevice>);

}  // namespace tf
}  // namespace pytfcomm
