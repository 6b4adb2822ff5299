// PytfcommAllReduce on CPU: combines N local replicas of M tensors in the
// engine (local/local_reduce.h), then, with a communicator, all-reduces the
// fusion buffers across processes on the communicator's executor thread.
//
// Fusion: consecutive tensors of one dtype smaller than
// fusion_threshold_bytes share one output buffer (each at a 64-byte aligned
// offset, so TF's aligned Eigen maps stay valid), up to the threshold; a
// tensor at or above it gets its own buffer. Outputs are zero-copy views of
// those buffers, and every replica's output j is the same Tensor (TF tensors
// are immutable and refcounted), so replicas hold identical bytes by
// construction. Across processes there is one collective per buffer.
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/reduce.h"
#include "local/local_reduce.h"
#include "observe/timeline.h"
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

constexpr int64_t kAlign = 64;  // EIGEN_MAX_ALIGN_BYTES of the pip build

int64_t RoundUp(int64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// One fusion buffer: tensors [first..] of one dtype at the given byte offsets.
struct Pack {
  DType dtype;
  tensorflow::DataType tf_dtype;
  std::vector<int> tensors;
  std::vector<int64_t> offsets;
  int64_t bytes = 0;  // padded size
  Tensor buffer;
  uint32_t tag = 2166136261u;  // FNV-1a of the member tensors' shapes
  // One replica, one tensor: the cross-process all-reduce reads the input
  // itself (no local copy into the buffer first).
  const void* direct_src = nullptr;
  size_t direct_count = 0;
};

class AllReduceOp : public AsyncOpKernel {
 public:
  explicit AllReduceOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    std::string op, alg;
    OP_REQUIRES_OK(c, c->GetAttr("num_devices", &num_devices_));
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &op));
    OP_REQUIRES_OK(c, c->GetAttr("fusion_threshold_bytes", &threshold_));
    OP_REQUIRES_OK(c, c->GetAttr("comm_handle", &comm_handle_));
    OP_REQUIRES_OK(c, c->GetAttr("algorithm", &alg));
    OP_REQUIRES_OK(c, c->GetAttr("timeout_seconds", &timeout_));
    OP_REQUIRES_OK(c, c->GetAttr("instance_key", &instance_key_));
    int group_size = 1;
    OP_REQUIRES_OK(c, c->GetAttr("group_size", &group_size));
    OP_REQUIRES(c, group_size == 1,
                absl::InvalidArgumentError("pytfcomm: a grouped all-reduce (group_size > 1, one op "
                                           "per GPU) has GPU kernels only; on CPUs one op takes "
                                           "every replica's tensors (num_devices)"));
    op_ = ParseReduceOp(op);
    algorithm_ = ParseAlgorithm(alg);
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const int n = num_devices_;
    const int total = ctx->num_inputs();
    OP_REQUIRES_ASYNC(ctx, total % n == 0,
                      absl::InvalidArgumentError("inputs must be a multiple of num_devices"), done);
    const int m = total / n;
    std::shared_ptr<Communicator> comm;
    if (comm_handle_ > 0) OP_REQUIRES_OK_ASYNC(ctx, FindComm(comm_handle_, &comm), done);
    const bool cross = comm && comm->size() > 1;
    count(CounterKind::kAllReduceOps);

    // Every replica must hold the same dtype and shape at each position.
    std::vector<DType> dtypes(m);
    for (int j = 0; j < m; ++j) {
      const Tensor& t0 = ctx->input(j);
      OP_REQUIRES_ASYNC(ctx, ToDType(t0.dtype(), &dtypes[j]),
                        absl::InvalidArgumentError("pytfcomm: unsupported dtype " +
                                                   tensorflow::DataTypeString(t0.dtype())),
                        done);
      for (int i = 1; i < n; ++i) {
        const Tensor& t = ctx->input(i * m + j);
        OP_REQUIRES_ASYNC(
            ctx, t.dtype() == t0.dtype() && t.shape() == t0.shape(),
            absl::InvalidArgumentError("pytfcomm all-reduce: tensor " + std::to_string(j) +
                                       " of replica " + std::to_string(i) + " is " +
                                       t.DebugString() + " but replica 0 has " + t0.DebugString() +
                                       "; every replica must pass the same shapes and dtypes"),
            done);
      }
    }

    // One replica in this process and no peers: nothing to combine.
    // (Any op of a single value, mean included, is that value.)
    if (n == 1 && !cross) {
      for (int j = 0; j < m; ++j) ctx->set_output(j, ctx->input(j));
      return done();
    }

    Timeline* timeline = comm ? comm->timeline() : nullptr;  // PYTFCOMM_TIMELINE
    const int64_t fuse_start = timeline ? Timeline::now_ns() : 0;
    std::vector<Pack> packs;
    Plan(ctx, dtypes, m, &packs);
    count(CounterKind::kFusedPacks, static_cast<int64_t>(packs.size()));
    for (Pack& p : packs) {
      OP_REQUIRES_OK_ASYNC(
          ctx, AllocateOutputBuffer(ctx, tensorflow::DT_INT8, TensorShape({p.bytes}), &p.buffer),
          done);
    }
    std::vector<ReduceSpan> spans;
    for (Pack& p : packs) {
      char* base = static_cast<char*>(p.buffer.data());
      int64_t end = 0;
      for (size_t k = 0; k < p.tensors.size(); ++k) {
        const int j = p.tensors[k];
        const Tensor& t0 = ctx->input(j);
        const int64_t nbytes = static_cast<int64_t>(t0.TotalBytes());
        // Padding joins cross-process reductions: make it zeros, never garbage.
        std::memset(base + end, 0, p.offsets[k] - end);
        end = p.offsets[k] + nbytes;
        Tensor view;
        OP_REQUIRES_OK_ASYNC(
            ctx, view.BitcastFrom(p.buffer.Slice(p.offsets[k], end), t0.dtype(), t0.shape()), done);
        ReduceSpan s;
        s.out = base + p.offsets[k];
        s.count = static_cast<size_t>(t0.NumElements());
        s.dtype = dtypes[j];
        for (int i = 0; i < n; ++i) s.inputs.push_back(ctx->input(i * m + j).data());
        if (n == 1 && cross && p.tensors.size() == 1) {
          p.direct_src = s.inputs[0];
          p.direct_count = s.count;
        } else {
          spans.push_back(std::move(s));
        }
        for (int i = 0; i < n; ++i) ctx->set_output(i * m + j, view);
      }
      std::memset(base + end, 0, p.bytes - end);
    }
    // Empty tensors need no work but still need outputs.
    for (int j = 0; j < m; ++j) {
      if (ctx->input(j).NumElements() != 0) continue;
      for (int i = 0; i < n; ++i) ctx->set_output(i * m + j, ctx->input(j));
    }

    // Purely local and compute-bound: runs here, on the TF thread, in parallel.
    const ReduceOp local_op = cross && op_ == ReduceOp::kMean ? ReduceOp::kSum : op_;
    OP_REQUIRES_OK_ASYNC(ctx, Guard("all-reduce", [&] { local_reduce(spans, local_op, n); }), done);
    if (timeline) {
      int64_t fused = 0;
      for (const Pack& p : packs) fused += p.bytes;
      timeline->add_span("fuse_local_reduce", fuse_start, Timeline::now_ns(), fused);
    }
    if (!cross) return done();

    // Across processes: one collective per fusion buffer, submitted
    // together; the engine calls back when all are done (no TF thread waits).
    const ReduceOp wire_op = op_ == ReduceOp::kMean ? ReduceOp::kSum : op_;
    std::vector<std::unique_ptr<Request>> reqs;
    for (const Pack& p : packs) {
      void* buf = const_cast<char*>(p.buffer.tensor_data().data());
      const size_t elems =
          p.direct_src ? p.direct_count : static_cast<size_t>(p.bytes) / dtype_size(p.dtype);
      reqs.push_back(comm->make_request(algorithms::CollectiveKind::kAllreduce,
                                        p.direct_src ? p.direct_src : buf, buf, elems, p.dtype,
                                        wire_op, algorithm_, 0, CoreTimeout(timeout_), p.tag | 1u));
    }
    const int64_t contributions = int64_t{num_devices_} * comm->size();
    SubmitCrossWorker(ctx, std::move(done), "cross-worker all-reduce", *comm,
                      InstanceStream(ctx, instance_key_), OpLabel("allreduce", ctx),
                      std::move(reqs), [this, comm, packs = std::move(packs), contributions] {
                        for (const Pack& p : packs) {
                          if (op_ == ReduceOp::kMean) {
                            void* buf = const_cast<char*>(p.buffer.tensor_data().data());
                            const size_t elems =
                                p.direct_src ? p.direct_count
                                             : static_cast<size_t>(p.bytes) / dtype_size(p.dtype);
                            divide(buf, buf, elems, p.dtype, contributions);
                          }
                          count(CounterKind::kCrossWorkerOps);
                        }
                      });
  }

 private:
  // Groups tensors into fusion buffers (see the file comment). The plan
  // depends only on shapes, dtypes and the threshold, so every process
  // computes the same one.
  void Plan(OpKernelContext* ctx, const std::vector<DType>& dtypes, int m,
            std::vector<Pack>* packs) {
    std::map<DType, size_t> open;  // dtype -> index of its pack still filling
    for (int j = 0; j < m; ++j) {
      const Tensor& t = ctx->input(j);
      const int64_t nbytes = static_cast<int64_t>(t.TotalBytes());
      if (t.NumElements() == 0) continue;
      size_t index;
      auto it = open.find(dtypes[j]);
      if (nbytes < threshold_ && it != open.end() &&
          (*packs)[it->second].bytes + nbytes <= threshold_) {
        index = it->second;
      } else {
        index = packs->size();
        packs->push_back(Pack{dtypes[j], t.dtype(), {}, {}, 0, Tensor()});
        // A tensor at or above the threshold never shares its buffer.
        if (nbytes < threshold_) open[dtypes[j]] = index;
      }
      Pack& p = (*packs)[index];
      // The digest travels with the buffer's collective: workers that fused
      // different tensors (a different graph, or collectives run out of
      // order) fail with a mismatch instead of reducing unrelated bytes.
      auto mix = [&p](uint64_t v) {
        for (int b = 0; b < 8; ++b) p.tag = (p.tag ^ ((v >> (8 * b)) & 0xff)) * 16777619u;
      };
      mix(static_cast<uint64_t>(t.dims()));
      for (int d = 0; d < t.dims(); ++d) mix(static_cast<uint64_t>(t.dim_size(d)));
      p.tensors.push_back(j);
      p.offsets.push_back(p.bytes);
      p.bytes = RoundUp(p.bytes + nbytes);
    }
  }

  int num_devices_ = 1;
  ReduceOp op_ = ReduceOp::kSum;
  Algorithm algorithm_ = Algorithm::kAuto;
  int64_t threshold_ = 0;
  int64_t comm_handle_ = 0;
  float timeout_ = 0;
  std::string instance_key_;
};

REGISTER_KERNEL_BUILDER(Name("PytfcommAllReduce").Device(tensorflow::DEVICE_CPU), AllReduceOp);

}  // namespace
}  // namespace tf
}  // namespace pytfcomm
