// PytfcommAllReduce on CPU, the device part of AllReduceOp (tf/comm_kernels.h):
// combines N local replicas of M tensors in the engine (local/local_reduce.h),
// then, with a communicator, all-reduces the fusion buffers across processes
// on the communicator's executor thread.
//
// Fusion: the engine's plan (engine/fusion_plan.h) with the op's
// fusion_threshold_bytes as both thresholds, every tensor at a 64-byte
// aligned offset of its buffer, so TF's aligned Eigen maps stay valid. Outputs
// are zero-copy views of those buffers, and every replica's output j is the
// same Tensor (TF tensors are immutable and refcounted), so replicas hold
// identical bytes by construction. Across processes there is one collective
// per buffer.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/digest.h"
#include "common/reduce.h"
#include "engine/fusion_plan.h"
#include "local/local_reduce.h"
#include "observe/timeline.h"
#include "tf/comm_kernels.h"
#include "tf/cross_worker.h"
#include "tf/output_buffer.h"

namespace pytfcomm {
namespace tf {
namespace {

// One fusion buffer: tensors of one dtype at the given byte offsets.
struct Pack {
  DType dtype;
  std::vector<int> tensors;
  std::vector<int64_t> offsets;
  int64_t bytes = 0;  // padded size
  Tensor buffer;
  uint32_t tag = 0;  // FNV-1a of the member tensors' shapes
  // One replica, one tensor: the cross-process all-reduce reads the input
  // itself (no local copy into the buffer first).
  const void* direct_src = nullptr;
  size_t direct_count = 0;
  // ... and when TF hands that input over (no one else holds it), `buffer` is
  // the input itself and the all-reduce runs in place.
  bool in_place = false;
};

}  // namespace

template <>
struct AllReduceFunctor<CPUDevice> {
  static absl::Status CheckAttrs(const OpAttrs& a) {
    if (a.group_size == 1) return absl::OkStatus();
    return absl::InvalidArgumentError(
        "pytfcomm: a grouped all-reduce (group_size > 1, one op per GPU) has GPU kernels only; "
        "on CPUs one op takes every replica's tensors (num_devices)");
  }

  void operator()(OpKernelContext* ctx, AsyncOpKernel::DoneCallback done, const OpAttrs& a,
                  AllReduceArgs args) const {
    const int n = a.num_devices;
    const int m = args.m;
    const bool cross = args.cross;
    const std::shared_ptr<Communicator>& comm = args.comm;
    const std::vector<DType>& dtypes = args.dtypes;
    Timeline* timeline = comm ? comm->timeline() : nullptr;  // PYTFCOMM_TIMELINE
    const int64_t fuse_start = timeline ? Timeline::now_ns() : 0;
    std::vector<Pack> packs;
    OP_REQUIRES_OK_ASYNC(ctx, Plan(ctx, a.fusion_threshold, dtypes, &packs), done);
    count(CounterKind::kFusedPacks, static_cast<int64_t>(packs.size()));
    // One replica, one tensor to a buffer, across processes: the collective
    // reads that tensor itself (Pack::direct_src), in place where TF hands it over.
    auto direct = [&](const Pack& p) { return n == 1 && cross && p.tensors.size() == 1; };
    for (Pack& p : packs) {
      if (direct(p) && TakeInput(ctx, &p)) continue;
      OP_REQUIRES_OK_ASYNC(
          ctx, AllocateOutputBuffer(ctx, tensorflow::DT_INT8, TensorShape({p.bytes}), &p.buffer),
          done);
    }
    std::vector<ReduceSpan> spans;
    for (Pack& p : packs) {
      if (p.in_place) continue;  // its output is set: the input itself
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
        if (direct(p)) {
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
    const ReduceOp local_op = cross && a.op == ReduceOp::kMean ? ReduceOp::kSum : a.op;
    OP_REQUIRES_OK_ASYNC(ctx, Guard("all-reduce", [&] { local_reduce(spans, local_op, n); }), done);
    if (timeline) {
      int64_t fused = 0;
      for (const Pack& p : packs) fused += p.bytes;
      timeline->add_span("fuse_local_reduce", fuse_start, Timeline::now_ns(), fused);
    }
    if (!cross) return done();

    // Across processes: one collective per fusion buffer, submitted
    // together; the engine calls back when all are done (tf/cross_worker.h).
    const ReduceOp wire_op = a.op == ReduceOp::kMean ? ReduceOp::kSum : a.op;
    std::vector<std::unique_ptr<Request>> reqs;
    for (const Pack& p : packs) {
      void* buf = const_cast<char*>(p.buffer.tensor_data().data());
      reqs.push_back(comm->make_request(
          algorithms::CollectiveKind::kAllreduce, p.direct_src ? p.direct_src : buf, buf,
          Elements(p), p.dtype, wire_op, a.algorithm, 0, a.core_timeout(), p.tag | 1u));
    }
    const int64_t contributions = int64_t{n} * comm->size();
    SubmitCrossWorker(ctx, std::move(done), "cross-worker all-reduce", *comm,
                      InstanceStream(ctx, a.instance_key),
                      OpLabel("allreduce", ctx, a.instance_key), std::move(reqs),
                      [op = a.op, comm, packs = std::move(packs), contributions] {
                        for (const Pack& p : packs) {
                          if (op == ReduceOp::kMean) {
                            void* buf = const_cast<char*>(p.buffer.tensor_data().data());
                            divide(buf, buf, Elements(p), p.dtype, contributions);
                          }
                          count(CounterKind::kCrossWorkerOps);
                        }
                      });
  }

 private:
  // Out of place, the all-reduce writes every line of a separate output after
  // reading the input's (2-core VM, 16 MiB over shared memory: 2.3-2.4 ms in
  // place against 2.9-3.2 ms). So a lone tensor that TF lets this op take over
  // (its buffer referenced by nothing else: a gradient computed in the step,
  // never the caller's own tensor) becomes the output and is reduced where it
  // is. False when TF keeps the input; the pack then gets a buffer of its own.
  static bool TakeInput(OpKernelContext* ctx, Pack* p) {
    const int j = p->tensors[0];
    const Tensor& t0 = ctx->input(j);
    if (t0.NumElements() == 0) return false;
    std::unique_ptr<Tensor> t = ctx->forward_input(
        j, j, t0.dtype(), t0.shape(), ctx->output_memory_type(j), ctx->output_alloc_attr(j));
    if (!t) return false;
    p->buffer = *t;
    p->in_place = true;
    p->direct_src = p->buffer.tensor_data().data();
    p->direct_count = static_cast<size_t>(t0.NumElements());
    ctx->set_output(j, p->buffer);
    count(CounterKind::kInPlaceInputs);
    return true;
  }

  // Elements of a buffer's collective: the whole padded buffer, or the one
  // input it reads directly.
  static size_t Elements(const Pack& p) {
    return p.direct_src ? p.direct_count : static_cast<size_t>(p.bytes) / dtype_size(p.dtype);
  }

  // Groups tensors into fusion buffers (see the file comment). The plan
  // depends only on shapes, dtypes and the threshold, so every process
  // computes the same one.
  static absl::Status Plan(OpKernelContext* ctx, int64_t fusion_threshold,
                           const std::vector<DType>& dtypes, std::vector<Pack>* packs) {
    std::vector<FusionItem> items(dtypes.size());
    for (size_t j = 0; j < items.size(); ++j) {
      items[j] = {static_cast<size_t>(ctx->input(static_cast<int>(j)).NumElements()), dtypes[j]};
    }
    // A tensor of the threshold or more has its own buffer; 0 fuses nothing.
    const size_t threshold = static_cast<size_t>(std::max<int64_t>(fusion_threshold, 1));
    FusionPlan plan;
    TF_RETURN_IF_ERROR(Guard(
        "all-reduce", [&] { plan = plan_fusion(items, threshold, threshold, kTensorAlign); }));
    for (const FusionBucket& b : plan.buckets) {
      Pack p;
      p.dtype = b.dtype;
      // The digest travels with the buffer's collective: workers that fused
      // different tensors (a different graph, or collectives run out of
      // order) fail with a mismatch instead of reducing unrelated bytes.
      FieldDigest32 tag;
      for (size_t k = 0; k < b.items.size(); ++k) {
        const Tensor& t = ctx->input(static_cast<int>(b.items[k]));
        tag.mix(static_cast<uint64_t>(t.dims()));
        for (int d = 0; d < t.dims(); ++d) tag.mix(static_cast<uint64_t>(t.dim_size(d)));
        p.tensors.push_back(static_cast<int>(b.items[k]));
        p.offsets.push_back(static_cast<int64_t>(b.offsets[k] * dtype_size(b.dtype)));
      }
      p.tag = tag.value();
      p.bytes = AlignUp(static_cast<int64_t>(b.bytes()));
      packs->push_back(std::move(p));
    }
    return absl::OkStatus();
  }
};

REGISTER_KERNEL_BUILDER(Name("PytfcommAllReduce").Device(tensorflow::DEVICE_CPU),
                        AllReduceOp<CPUDevice>);

}  // namespace tf
}  // namespace pytfcomm
