// Output buffers of the pytfcomm TF ops. Large ones come from the engine's
// BufferCache (local/buffer_cache.h) through a tensorflow::Allocator
// adaptor, so a training step reuses the previous step's already-faulted
// memory instead of paying a page fault per 4 KiB of every gradient; small
// ones come from TF's own allocator as usual.
#pragma once

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace pytfcomm {
namespace tf {

// Buffers of at least this many bytes come from the cache.
constexpr int64_t kCachedOutputMinBytes = 256 << 10;

// A tensor of `dtype` and `shape` for an op's output; the status says why
// when no memory could be had.
absl::Status AllocateOutputBuffer(tensorflow::OpKernelContext* ctx, tensorflow::DataType dtype,
                                  const tensorflow::TensorShape& shape, tensorflow::Tensor* out);

}  // namespace tf
}  // namespace pytfcomm
