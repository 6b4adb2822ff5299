// TensorFlow's CUDA stream for the device a GPU kernel runs on.
//
// The only pytfcomm source that includes a TF header from outside
// tensorflow/core/framework: XLA's stream_executor/stream.h, for one
// virtual call, Stream::platform_specific_handle() (the CUstream behind TF's
// se::Stream). XLA and TSL internals move between TF releases (that is what
// broke Horovod), so this dependency stays in one small file that is easy
// to adapt; being virtual, the call also needs no symbol from a CUDA build
// of TF, so the library links against any TF of the same version.
#pragma once

#include "tensorflow/core/framework/op_kernel.h"

namespace pytfcomm {
namespace tf {

// The CUstream (as void*) that orders the op's inputs and outputs, or an
// Internal status that says why there is none.
absl::Status TfCudaStream(tensorflow::OpKernelContext* ctx, void** stream);

}  // namespace tf
}  // namespace pytfcomm
