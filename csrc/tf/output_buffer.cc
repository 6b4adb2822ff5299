#include "tf/output_buffer.h"

#include <string>

#include "local/buffer_cache.h"
#include "tensorflow/core/framework/allocator.h"
#include "tf/tf_common.h"

namespace pytfcomm {
namespace tf {
namespace {

class CachedHostAllocator : public tensorflow::Allocator {
 public:
  std::string Name() override { return "pytfcomm_cached_host"; }
  void* AllocateRaw(size_t alignment, size_t num_bytes) override {
    if (alignment > 4096) return nullptr;  // the cache's buffers are page aligned
    return tf_buffer_cache().take(num_bytes);
  }
  void DeallocateRaw(void* ptr) override { tf_buffer_cache().give(ptr); }
};

// Leaked on purpose: tensors holding its buffers may outlive static destructors.
CachedHostAllocator* allocator() {
  static CachedHostAllocator* a = new CachedHostAllocator;
  return a;
}

}  // namespace

absl::Status AllocateOutputBuffer(tensorflow::OpKernelContext* ctx, tensorflow::DataType dtype,
                                  const tensorflow::TensorShape& shape, tensorflow::Tensor* out) {
  const int64_t bytes =
      shape.num_elements() * static_cast<int64_t>(tensorflow::DataTypeSize(dtype));
  if (bytes >= kCachedOutputMinBytes) {
    // The cap comes from PYTFCOMM_TF_BUFFER_CACHE: a malformed value is an error here.
    absl::Status st = Guard("output allocation", [] { tf_buffer_cache(); });
    if (!st.ok()) return st;
    tensorflow::Tensor t(allocator(), dtype, shape);
    if (t.IsInitialized()) {
      *out = std::move(t);
      return absl::OkStatus();
    }
    // No memory for a cached buffer: TF's allocator reports the failure its way.
  }
  return ctx->allocate_temp(dtype, shape, out);
}

}  // namespace tf
}  // namespace pytfcomm
