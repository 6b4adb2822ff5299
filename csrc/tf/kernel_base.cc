#include "tf/kernel_base.h"

#include <string>

#include "common/digest.h"

#include "tf/output_buffer.h"

namespace pytfcomm {
namespace tf {

absl::Status CheckAllReduce(OpKernelContext* ctx, const OpAttrs& a, AllReduceArgs* args) {
  const int n = a.num_devices;
  const int total = ctx->num_inputs();
  if (total % n != 0) return absl::InvalidArgumentError("inputs must be a multiple of num_devices");
  const int m = total / n;
  args->m = m;
  TF_RETURN_IF_ERROR(OpComm(a, &args->comm));
  args->cross = args->comm && args->comm->size() > 1;
  args->dtypes.resize(static_cast<size_t>(m));
  for (int j = 0; j < m; ++j) {
    const Tensor& t0 = ctx->input(j);
    TF_RETURN_IF_ERROR(CoreDType(t0, "all-reduce", &args->dtypes[j], a.op));
    for (int i = 1; i < n; ++i) {
      const Tensor& t = ctx->input(i * m + j);
      if (t.dtype() != t0.dtype() || t.shape() != t0.shape()) {
        return absl::InvalidArgumentError(
            "pytfcomm all-reduce: tensor " + std::to_string(j) + " of replica " +
            std::to_string(i) + " is " + t.DebugString() + " but replica 0 has " +
            t0.DebugString() + "; every replica must pass the same shapes and dtypes");
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckBroadcast(OpKernelContext* ctx, const OpAttrs& a, BroadcastArgs* args) {
  TF_RETURN_IF_ERROR(CoreDType(ctx->input(0), "broadcast", &args->dtype));
  const int size = args->comm->size();
  if (a.root >= size) {
    return absl::InvalidArgumentError("pytfcomm broadcast: root_rank " + std::to_string(a.root) +
                                      " is not below size " + std::to_string(size));
  }
  return absl::OkStatus();
}

absl::Status CheckAllGather(OpKernelContext* ctx, const OpAttrs& a, AllGatherArgs* args) {
  const Tensor& t0 = ctx->input(0);
  TF_RETURN_IF_ERROR(CoreDType(t0, "all-gather", &args->dtype));
  if (t0.dims() < 1) {
    return absl::InvalidArgumentError("pytfcomm all-gather needs tensors of rank >= 1");
  }
  args->row = t0.shape();
  args->row.RemoveDim(0);
  args->counts.assign(static_cast<size_t>(a.num_devices), 0);
  args->rows = 0;
  for (int i = 0; i < a.num_devices; ++i) {
    const Tensor& t = ctx->input(i);
    TensorShape tail = t.shape();
    if (t.dims() >= 1) tail.RemoveDim(0);
    if (t.dims() < 1 || tail != args->row) {
      return absl::InvalidArgumentError("pytfcomm all-gather: replica " + std::to_string(i) +
                                        " has shape " + t.shape().DebugString() +
                                        ", replica 0 has " + t0.shape().DebugString() +
                                        "; only dimension 0 may differ");
    }
    args->counts[static_cast<size_t>(i)] = t.dim_size(0);
    args->rows += t.dim_size(0);
  }
  return absl::OkStatus();
}

uint32_t ShapeTag(tensorflow::DataType dtype, const TensorShape& shape) {
  FieldDigest<uint64_t> d;
  d.mix(static_cast<uint64_t>(dtype)).mix(static_cast<uint64_t>(shape.dims()));
  for (int i = 0; i < shape.dims(); ++i) d.mix(static_cast<uint64_t>(shape.dim_size(i)));
  const uint64_t h = d.value();
  return static_cast<uint32_t>(h ^ (h >> 32)) | 1u;
}

uint32_t ShapeTag(tensorflow::DataType dtype, const std::vector<TensorShape>& shapes) {
  if (shapes.size() == 1) return ShapeTag(dtype, shapes[0]);
  FieldDigest<uint64_t> d;
  d.mix(static_cast<uint64_t>(shapes.size()));
  for (const TensorShape& s : shapes) d.mix(ShapeTag(dtype, s));
  const uint64_t h = d.value();
  return static_cast<uint32_t>(h ^ (h >> 32)) | 1u;
}

absl::Status WholeRows(const char* what, uint64_t total, const TensorShape& row, TensorShape* out) {
  const uint64_t row_elems = static_cast<uint64_t>(row.num_elements());
  if (row_elems == 0 || total % row_elems != 0) {
    return absl::InternalError(std::string("pytfcomm ") + what + ": received " +
                               std::to_string(total) + " elements, not whole rows of " +
                               std::to_string(row_elems));
  }
  *out = row;
  out->InsertDim(0, static_cast<int64_t>(total / row_elems));
  return absl::OkStatus();
}

absl::Status AllocateSharedOutput(OpKernelContext* ctx, const OpAttrs& a, SharedOutput where,
                                  tensorflow::DataType dtype, const TensorShape& shape,
                                  Tensor* out) {
  int first = 0;
  if (where == SharedOutput::kCachedHost) {
    TF_RETURN_IF_ERROR(AllocateOutputBuffer(ctx, dtype, shape, out));
  } else {
    Tensor* output = nullptr;  // output 0 itself: TF's allocator for the op's outputs
    TF_RETURN_IF_ERROR(ctx->allocate_output(0, shape, &output));
    *out = *output;
    first = 1;
  }
  for (int i = first; i < a.num_devices; ++i) ctx->set_output(i, *out);
  return absl::OkStatus();
}

void ForwardInputs(OpKernelContext* ctx) {
  for (int j = 0; j < ctx->num_inputs(); ++j) ctx->set_output(j, ctx->input(j));
}

}  // namespace tf
}  // namespace pytfcomm
