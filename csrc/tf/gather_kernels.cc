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
                      InstanceStream(ctx, a.instance_key),
                      OpLabel("broadcast", ctx, a.instance_key), std::move(reqs),
                      [comm, out] { count(CounterKind::kCrossWorkerOps); });
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
    Tensor local = t0;  // one replica: its input, read in place
    if (n > 1) {
      TensorShape local_shape = row;
      local_shape.InsertDim(0, rows);
      OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_temp(t0.dtype(), local_shape, &local), done);
      const int64_t row_bytes = rows ? static_cast<int64_t>(local.TotalBytes()) / rows : 0;
      char* base = const_cast<char*>(local.tensor_data().data());
      parallel_for(n, [&](size_t i) {
        const Tensor& t = ctx->input(static_cast<int>(i));
        std::memcpy(base + offsets[i] * row_bytes, t.tensor_data().data(), t.TotalBytes());
      });
    }
    if (!comm) {
      for (int i = 0; i < n; ++i) ctx->set_output(i, local);
      return done();
    }
    // Across processes: the core's allgatherv, one collective whose counts
    // ride in the negotiation, tagged with the dtype and the row shape (ranks
    // that disagree on either fail with a mismatch on every rank). The output
    // is allocated on the engine's thread once every process's count is
    // known; a rank that joined adds no rows. Rows of no width carry no
    // elements: then the row counts themselves are gathered.
    const int64_t row_elems = row.num_elements();
    auto st = std::make_shared<Gathered>();
    st->counts.assign(static_cast<size_t>(comm->size()), 0);
    st->rows = rows;
    const bool counts_only = row_elems == 0;
    std::unique_ptr<Request> req = comm->make_request(
        algorithms::CollectiveKind::kAllgatherv,
        counts_only ? static_cast<const void*>(&st->rows) : local.tensor_data().data(), nullptr,
        counts_only ? 1 : static_cast<size_t>(rows * row_elems), counts_only ? DType::kInt64 : dt,
        ReduceOp::kSum, Algorithm::kAuto, 0, a.core_timeout(), ShapeTag(t0.dtype(), row));
    req->recv_counts = st->counts.data();
    const tensorflow::DataType type = t0.dtype();
    req->alloc_out = [&a, ctx, st, row, type, counts_only](uint64_t total) -> void* {
      if (counts_only) {  // the row counts: the output itself has no bytes
        st->status = ctx->allocate_temp(tensorflow::DT_INT64,
                                        TensorShape({static_cast<int64_t>(total)}), &st->table);
        return st->status.ok() ? const_cast<char*>(st->table.tensor_data().data()) : nullptr;
      }
      TensorShape shape;
      st->status = WholeRows("all-gather", total, row, &shape);
      if (st->status.ok()) {
        st->status = AllocateSharedOutput(ctx, a, SharedOutput::kCachedHost, type, shape, &st->out);
      }
      return st->status.ok() ? const_cast<char*>(st->out.tensor_data().data()) : nullptr;
    };
    std::vector<std::unique_ptr<Request>> reqs;
    reqs.push_back(std::move(req));
    auto after = [&a, ctx, comm, local, st, row, type, counts_only] {
      if (!st->status.ok()) return ctx->SetStatus(st->status);
      if (counts_only) {
        int64_t total = 0;
        auto table = st->table.flat<int64_t>();
        for (int64_t i = 0; i < table.size(); ++i) total += table(i);
        TensorShape shape = row;
        shape.InsertDim(0, total);
        Tensor out;
        absl::Status s = AllocateSharedOutput(ctx, a, SharedOutput::kCachedHost, type, shape, &out);
        if (!s.ok()) return ctx->SetStatus(s);
      }
      count(CounterKind::kCrossWorkerOps);
    };
    SubmitCrossWorker(ctx, std::move(done), "cross-worker all-gather", *comm,
                      InstanceStream(ctx, a.instance_key),
                      OpLabel("allgather", ctx, a.instance_key), std::move(reqs), std::move(after));
  }

 private:
  // What the engine's thread fills in for the kernel.
  struct Gathered {
    int64_t rows = 0;              // this process's (sent when the rows have no width)
    std::vector<uint64_t> counts;  // elements from each process
    Tensor out, table;
    absl::Status status;  // of the output's allocation
  };
};

REGISTER_KERNEL_BUILDER(Name("PytfcommBroadcast").Device(tensorflow::DEVICE_CPU),
                        BroadcastOp<CPUDevice>);
REGISTER_KERNEL_BUILDER(Name("PytfcommAllGather").Device(tensorflow::DEVICE_CPU),
                        AllGatherOp<CPUDevice>);

}  // namespace tf
}  // namespace pytfcomm
