// PytfcommReduceScatter and PytfcommAlltoall on CPU: one process's tensor per
// op (num_devices = 1, the Horovod-style path), straight onto the core's
// reduce_scatter and alltoallv, so neither moves more bytes than the
// collective needs. Without other processes each returns its input.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "local/local_reduce.h"
#include "tf/cross_worker.h"
#include "tf/kernel_base.h"
#include "tf/output_buffer.h"

namespace pytfcomm {
namespace tf {
namespace {

absl::Status OneReplica(const OpAttrs& a, const char* what) {
  if (a.num_devices == 1) return absl::OkStatus();
  return absl::InvalidArgumentError(std::string("pytfcomm ") + what +
                                    " takes one tensor per op (num_devices = 1), got " +
                                    std::to_string(a.num_devices));
}

// The elements of one row of `shape` (its dimensions after the first).
int64_t RowElements(const TensorShape& shape) {
  int64_t n = 1;
  for (int i = 1; i < shape.dims(); ++i) n *= shape.dim_size(i);
  return n;
}

// Reduce-scatter along dimension 0 with Horovod's split: of R rows on N
// ranks, rank r gets R / N rows, the first R % N ranks one more, in rank
// order. One tensor whose rows divide evenly goes straight through the core's
// reduce-scatter. Otherwise (several tensors of one dtype, or unequal parts)
// the tensors are packed into N equal segments, segment k holding each
// tensor's block k (its rows for rank k, padded with zeros to the largest
// block, each tensor at a 64-byte aligned offset), and one reduce-scatter of
// the packed buffer gives this rank its segment; every output is a view of
// it (no copy out).
class ReduceScatterOp : public CommKernel {
 public:
  explicit ReduceScatterOp(OpKernelConstruction* c) : CommKernel(c) {
    OP_REQUIRES_OK(c, OneReplica(a_, "reduce-scatter"));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const int m = ctx->num_inputs();
    DType dt = DType::kFloat32;
    std::vector<TensorShape> shapes;
    for (int j = 0; j < m; ++j) {
      const Tensor& in = ctx->input(j);
      OP_REQUIRES_OK_ASYNC(ctx, CoreDType(in, "reduce-scatter", &dt, a_.op), done);
      OP_REQUIRES_ASYNC(
          ctx, in.dims() >= 1,
          absl::InvalidArgumentError("pytfcomm reduce-scatter needs tensors of rank >= 1"), done);
      shapes.push_back(in.shape());
    }
    std::shared_ptr<Communicator> comm;
    OP_REQUIRES_OK_ASYNC(ctx, OpComm(a_, &comm), done);
    if (!comm || comm->size() == 1) {  // the whole sum (or mean, min, ...) of one
      ForwardInputs(ctx);
      return done();
    }
    const tensorflow::DataType type = ctx->input(0).dtype();
    const int64_t n = comm->size(), r = comm->rank();
    const uint32_t tag = ShapeTag(type, shapes);
    std::vector<Part> parts(static_cast<size_t>(m));
    int64_t segment = 0;  // bytes
    for (int j = 0; j < m; ++j) {
      Part& p = parts[static_cast<size_t>(j)];
      const int64_t rows = shapes[j].dim_size(0);
      p.row_bytes = RowElements(shapes[j]) * tensorflow::DataTypeSize(type);
      p.base = rows / n;
      p.extra = rows % n;
      p.block = p.base + (p.extra ? 1 : 0);
      p.offset = segment;
      segment = AlignUp(segment + p.block * p.row_bytes);
    }
    const Part& p0 = parts[0];
    if (m == 1 && p0.extra == 0) {  // straight through, no packing
      TensorShape shape = shapes[0];
      shape.set_dim(0, p0.block);
      Tensor out;
      OP_REQUIRES_OK_ASYNC(ctx, AllocateOutputBuffer(ctx, type, shape, &out), done);
      ctx->set_output(0, out);
      Submit(ctx, std::move(done), *comm, ctx->input(0), out, ctx->input(0).NumElements(), dt, tag);
      return;
    }
    Tensor packed, out;
    OP_REQUIRES_OK_ASYNC(
        ctx, ctx->allocate_temp(tensorflow::DT_INT8, TensorShape({segment * n}), &packed), done);
    OP_REQUIRES_OK_ASYNC(
        ctx, AllocateOutputBuffer(ctx, tensorflow::DT_INT8, TensorShape({segment}), &out), done);
    char* dst = const_cast<char*>(packed.tensor_data().data());
    for (int64_t k = 0; k < n; ++k) {
      char* seg = dst + k * segment;
      int64_t end = 0;  // bytes of the segment written so far
      for (int j = 0; j < m; ++j) {
        const Part& p = parts[static_cast<size_t>(j)];
        const int64_t first = k * p.base + std::min(k, p.extra);
        const int64_t bytes = (p.base + (k < p.extra ? 1 : 0)) * p.row_bytes;
        std::memset(seg + end, 0, static_cast<size_t>(p.offset - end));  // padding: zeros
        std::memcpy(seg + p.offset, ctx->input(j).tensor_data().data() + first * p.row_bytes,
                    static_cast<size_t>(bytes));
        end = p.offset + bytes;
      }
      std::memset(seg + end, 0, static_cast<size_t>(segment - end));
    }
    for (int j = 0; j < m; ++j) {
      const Part& p = parts[static_cast<size_t>(j)];
      const int64_t mine = p.base + (r < p.extra ? 1 : 0);
      TensorShape shape = shapes[j];
      shape.set_dim(0, mine);
      Tensor view;
      OP_REQUIRES_OK_ASYNC(
          ctx, view.BitcastFrom(out.Slice(p.offset, p.offset + mine * p.row_bytes), type, shape),
          done);
      ctx->set_output(j, view);
    }
    Submit(ctx, std::move(done), *comm, packed, out, segment * n / tensorflow::DataTypeSize(type),
           dt, tag);
  }

 private:
  // Where one tensor's block lies in every segment of the packed buffer.
  struct Part {
    int64_t row_bytes = 0, base = 0, extra = 0, block = 0;
    int64_t offset = 0;  // in the segment, bytes
  };

  // One reduce-scatter of `elements` of `in` into `out` (both held until it is done).
  void Submit(OpKernelContext* ctx, DoneCallback done, Communicator& comm, const Tensor& in,
              const Tensor& out, int64_t elements, DType dt, uint32_t tag) const {
    std::vector<std::unique_ptr<Request>> reqs;
    reqs.push_back(comm.make_request(
        algorithms::CollectiveKind::kReduceScatter, in.tensor_data().data(),
        const_cast<char*>(out.tensor_data().data()), static_cast<size_t>(elements), dt, a_.op,
        Algorithm::kAuto, 0, a_.core_timeout(), tag));
    SubmitCrossWorker(ctx, std::move(done), "cross-worker reduce-scatter", comm,
                      InstanceStream(ctx, a_.instance_key),
                      OpLabel("reducescatter", ctx, a_.instance_key), std::move(reqs),
                      [in, out] { count(CounterKind::kCrossWorkerOps); });
  }
};

// All-to-all along dimension 0: splits[i] rows (in order) go to rank i;
// output 0 is what every rank sent this one, in rank order, output 1 how
// many rows came from each. One exchange of the counts, then the pairwise
// exchange of the rows (the core's alltoallv); the output is allocated once
// the counts are known.
class AlltoallOp : public CommKernel {
 public:
  explicit AlltoallOp(OpKernelConstruction* c) : CommKernel(c) {
    OP_REQUIRES_OK(c, OneReplica(a_, "all-to-all"));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Tensor& in = ctx->input(0);
    const Tensor& splits = ctx->input(1);
    DType dt;
    OP_REQUIRES_OK_ASYNC(ctx, CoreDType(in, "all-to-all", &dt), done);
    OP_REQUIRES_ASYNC(ctx, in.dims() >= 1,
                      absl::InvalidArgumentError("pytfcomm all-to-all needs a tensor of rank >= 1"),
                      done);
    std::shared_ptr<Communicator> comm;
    OP_REQUIRES_OK_ASYNC(ctx, OpComm(a_, &comm), done);
    const int64_t n = comm ? comm->size() : 1;
    const absl::Status valid = CheckSplits(splits, n, in.dim_size(0));
    if (n == 1) {
      OP_REQUIRES_OK_ASYNC(ctx, valid, done);
      ctx->set_output(0, in);
      ctx->set_output(1, splits);
      return done();
    }
    Tensor* received = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(1, TensorShape({n}), &received), done);
    auto st = std::make_shared<State>();
    st->row = in.shape();
    st->row.RemoveDim(0);
    st->row_elems = RowElements(in.shape());
    st->dtype = in.dtype();
    st->received = *received;
    st->recv.assign(static_cast<size_t>(n), 0);
    // Rows of no width carry no elements: the counts themselves travel instead.
    const bool counts_only = st->row_elems == 0;
    uint32_t tag = ShapeTag(in.dtype(), st->row);
    if (!valid.ok()) {
      // Bad splits are this rank's error, but its peers must not wait for it
      // until their timeout: it still takes part, sending nothing, under a
      // tag no valid call has, so that every rank fails at once (peers with a
      // mismatch, this rank with the reason).
      ctx->SetStatus(valid);
      st->failed = true;
      st->send.assign(static_cast<size_t>(n), 0);
      tag = ShapeTag(tensorflow::DT_INVALID, st->row);
    } else if (counts_only) {
      st->send.assign(static_cast<size_t>(n), 1);
    } else {
      auto split = splits.flat<int64_t>();
      for (int64_t i = 0; i < n; ++i) {
        st->send.push_back(static_cast<uint64_t>(split(i) * st->row_elems));
      }
    }
    uint64_t elements = 0;
    for (uint64_t e : st->send) elements += e;
    std::unique_ptr<Request> req =
        comm->make_request(algorithms::CollectiveKind::kAlltoallv,
                           counts_only ? splits.tensor_data().data() : in.tensor_data().data(),
                           nullptr, static_cast<size_t>(elements), counts_only ? DType::kInt64 : dt,
                           ReduceOp::kSum, Algorithm::kAuto, 0, a_.core_timeout(), tag);
    req->send_counts = st->send.data();
    req->recv_counts = st->recv.data();
    req->alloc_out = [ctx, st, counts_only](uint64_t total) -> void* {
      // Called once on the engine's thread, with the number of elements coming.
      if (counts_only) {
        st->status = ctx->allocate_temp(tensorflow::DT_INT64,
                                        TensorShape({static_cast<int64_t>(total)}), &st->counts);
        return st->status.ok() ? const_cast<char*>(st->counts.tensor_data().data()) : nullptr;
      }
      TensorShape shape;
      st->status = WholeRows("all-to-all", total, st->row, &shape);
      if (st->status.ok()) st->status = AllocateOutputBuffer(ctx, st->dtype, shape, &st->out);
      return st->status.ok() ? const_cast<char*>(st->out.tensor_data().data()) : nullptr;
    };
    std::vector<std::unique_ptr<Request>> reqs;
    reqs.push_back(std::move(req));
    auto after = [ctx, comm, st, counts_only, in, splits] {
      if (st->failed) return;  // the status says why
      if (!st->status.ok()) return ctx->SetStatus(st->status);
      auto got = st->received.flat<int64_t>();
      int64_t rows = 0;
      for (size_t i = 0; i < st->recv.size(); ++i) {
        got(static_cast<int64_t>(i)) = counts_only
                                           ? st->counts.flat<int64_t>()(static_cast<int64_t>(i))
                                           : static_cast<int64_t>(st->recv[i]) / st->row_elems;
        rows += got(static_cast<int64_t>(i));
      }
      if (counts_only) {
        TensorShape shape = st->row;
        shape.InsertDim(0, rows);
        Tensor* out = nullptr;
        absl::Status s = ctx->allocate_output(0, shape, &out);
        if (!s.ok()) return ctx->SetStatus(s);
      } else {
        ctx->set_output(0, st->out);
      }
      count(CounterKind::kCrossWorkerOps);
    };
    SubmitCrossWorker(
        ctx, std::move(done), "cross-worker all-to-all", *comm,
        InstanceStream(ctx, a_.instance_key),
        OpLabel(valid.ok() ? "alltoall" : "alltoall (bad splits)", ctx, a_.instance_key),
        std::move(reqs), std::move(after));
  }

 private:
  // What the engine's thread fills in for the kernel.
  struct State {
    TensorShape row;
    int64_t row_elems = 0;
    tensorflow::DataType dtype = tensorflow::DT_FLOAT;
    std::vector<uint64_t> send, recv;  // elements to and from each rank
    Tensor out, counts, received;
    absl::Status status;  // of the output's allocation
    bool failed = false;  // bad splits (the op's status is set)
  };

  // A vector of `n` counts, none negative, adding up to `rows`.
  static absl::Status CheckSplits(const Tensor& splits, int64_t n, int64_t rows) {
    if (splits.dims() != 1 || splits.dim_size(0) != n) {
      return absl::InvalidArgumentError("pytfcomm all-to-all: splits must be a vector of " +
                                        std::to_string(n) + " counts (one per rank), got shape " +
                                        splits.shape().DebugString());
    }
    auto s = splits.flat<int64_t>();
    int64_t sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (s(i) < 0 || s(i) > rows - sum) {
        return absl::InvalidArgumentError(
            "pytfcomm all-to-all: splits must be non-negative and add up to dimension 0 (" +
            std::to_string(rows) + "); split " + std::to_string(i) + " is " + std::to_string(s(i)) +
            " after " + std::to_string(sum) + " rows");
      }
      sum += s(i);
    }
    if (sum != rows) {
      return absl::InvalidArgumentError("pytfcomm all-to-all: splits add up to " +
                                        std::to_string(sum) + ", dimension 0 is " +
                                        std::to_string(rows));
    }
    return absl::OkStatus();
  }
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("PytfcommReduceScatter").Device(tensorflow::DEVICE_CPU),
                        ReduceScatterOp);
REGISTER_KERNEL_BUILDER(Name("PytfcommAlltoall").Device(tensorflow::DEVICE_CPU), AlltoallOp);

}  // namespace tf
}  // namespace pytfcomm
