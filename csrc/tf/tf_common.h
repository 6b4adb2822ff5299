// What every pytfcomm kernel needs at the TF boundary: the
// pytfcomm::Error -> tf status mapping, the lookup of the communicator an op
// names, and the dtype check. Nothing here throws.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>

#include "common/dtype.h"
#include "engine/communicator.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tf/op_attrs.h"

namespace pytfcomm {
namespace tf {

using tensorflow::AsyncOpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

// Runs body(); a pytfcomm::Error becomes the status of its kind's row in
// PTC_ERROR_KINDS (common/error.h); any other exception becomes Internal.
// `what` names the op.
absl::Status Guard(const char* what, const std::function<void()>& body);
// The same mapping for an outcome the engine reported (null: OK).
absl::Status StatusOf(const char* what, std::exception_ptr error);

// The communicator the op's comm_handle names (null without one), or an
// InvalidArgument status when none has that handle.
absl::Status OpComm(const OpAttrs& a, std::shared_ptr<Communicator>* comm);

// `t`'s dtype as the core's, or InvalidArgument ("pytfcomm <what>: ...");
// also for a mean of bools, which no reduction defines.
absl::Status CoreDType(const Tensor& t, const char* what, DType* dt, ReduceOp op = ReduceOp::kSum);

}  // namespace tf
}  // namespace pytfcomm
