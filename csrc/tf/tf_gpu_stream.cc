#include "tf/tf_gpu_stream.h"

#include <string>

#include "xla/stream_executor/stream.h"

namespace pytfcomm {
namespace tf {

absl::Status TfCudaStream(tensorflow::OpKernelContext* ctx, void** stream) {
  *stream = nullptr;
  const tensorflow::DeviceContext* dc = ctx->op_device_context();
  stream_executor::Stream* s = dc ? dc->stream() : nullptr;
  if (s != nullptr) *stream = s->platform_specific_handle().stream;
  if (*stream == nullptr) {
    return absl::InternalError(std::string("pytfcomm: the GPU kernel runs on ") +
                               ctx->device()->name() +
                               ", which has no CUDA stream (is this a CUDA build of TensorFlow?)");
  }
  return absl::OkStatus();
}

}  // namespace tf
}  // namespace pytfcomm
