#include "tf/tf_common.h"

#include <exception>
#include <string>

#include "common/error.h"
#include "engine/registry.h"

namespace pytfcomm {
namespace tf {

bool ToDType(tensorflow::DataType t, DType* out) {
  switch (t) {
    case tensorflow::DT_HALF:
      *out = DType::kFloat16;
      return true;
    case tensorflow::DT_BFLOAT16:
      *out = DType::kBFloat16;
      return true;
    case tensorflow::DT_FLOAT:
      *out = DType::kFloat32;
      return true;
    case tensorflow::DT_DOUBLE:
      *out = DType::kFloat64;
      return true;
    case tensorflow::DT_INT8:
      *out = DType::kInt8;
      return true;
    case tensorflow::DT_UINT8:
      *out = DType::kUInt8;
      return true;
    case tensorflow::DT_INT32:
      *out = DType::kInt32;
      return true;
    case tensorflow::DT_INT64:
      *out = DType::kInt64;
      return true;
    case tensorflow::DT_BOOL:
      *out = DType::kBool;
      return true;
    default:
      return false;
  }
}

ReduceOp ParseReduceOp(const std::string& s) {
  if (s == "mean") return ReduceOp::kMean;
  if (s == "min") return ReduceOp::kMin;
  if (s == "max") return ReduceOp::kMax;
  if (s == "prod") return ReduceOp::kProd;
  return ReduceOp::kSum;
}

Algorithm ParseAlgorithm(const std::string& s) {
  if (s == "ring") return Algorithm::kRing;
  if (s == "hierarchical") return Algorithm::kHierarchical;
  if (s == "recursive_doubling") return Algorithm::kRecursiveDoubling;
  return Algorithm::kAuto;
}

absl::Status Guard(const char* what, const std::function<void()>& body) {
  try {
    body();
    return absl::OkStatus();
  } catch (...) {
    return StatusOf(what, std::current_exception());
  }
}

absl::Status StatusOf(const char* what, std::exception_ptr error) {
  if (!error) return absl::OkStatus();
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    std::string msg = std::string("pytfcomm ") + what + ": " + e.what();
    switch (e.kind()) {
      case ErrorKind::kPeerLost:
        return absl::UnavailableError(msg);
      case ErrorKind::kTimeout:
        return absl::DeadlineExceededError(msg);
      case ErrorKind::kMismatch:
      case ErrorKind::kClosed:
        return absl::FailedPreconditionError(msg);
      case ErrorKind::kInvalidArgument:
      case ErrorKind::kConfig:
        return absl::InvalidArgumentError(msg);
      case ErrorKind::kAuth:
        return absl::PermissionDeniedError(msg);
      case ErrorKind::kInterrupted:
        return absl::CancelledError(msg);
      default:
        return absl::InternalError(msg);
    }
  } catch (const std::exception& e) {
    return absl::InternalError(std::string("pytfcomm ") + what + ": " + e.what());
  } catch (...) {
    return absl::InternalError(std::string("pytfcomm ") + what + ": unknown exception");
  }
}

absl::Status FindComm(int64_t handle, std::shared_ptr<Communicator>* out) {
  *out = find_communicator(handle);
  if (!*out) {
    return absl::InvalidArgumentError(
        "pytfcomm: no communicator has handle " + std::to_string(handle) +
        " in this process (was it closed? create one with pytfcomm.init())");
  }
  return absl::OkStatus();
}

absl::Status CheckBroadcast(const tensorflow::Tensor& in, const Communicator& comm, int root,
                            DType* dt) {
  if (!ToDType(in.dtype(), dt)) {
    return absl::InvalidArgumentError("pytfcomm broadcast: unsupported dtype");
  }
  if (root >= comm.size()) {
    return absl::InvalidArgumentError("pytfcomm broadcast: root_rank " + std::to_string(root) +
                                      " is not below size " + std::to_string(comm.size()));
  }
  return absl::OkStatus();
}

absl::Status GatherRows(tensorflow::OpKernelContext* ctx, int n, tensorflow::TensorShape* row,
                        std::vector<int64_t>* rows) {
  const tensorflow::Tensor& t0 = ctx->input(0);
  if (t0.dims() < 1) {
    return absl::InvalidArgumentError("pytfcomm all-gather needs tensors of rank >= 1");
  }
  *row = t0.shape();
  row->RemoveDim(0);
  rows->assign(static_cast<size_t>(n), 0);
  for (int i = 0; i < n; ++i) {
    const tensorflow::Tensor& t = ctx->input(i);
    tensorflow::TensorShape tail = t.shape();
    if (t.dims() >= 1) tail.RemoveDim(0);
    if (t.dims() < 1 || tail != *row) {
      return absl::InvalidArgumentError("pytfcomm all-gather: replica " + std::to_string(i) +
                                        " has shape " + t.shape().DebugString() +
                                        ", replica 0 has " + t0.shape().DebugString() +
                                        "; only dimension 0 may differ");
    }
    (*rows)[static_cast<size_t>(i)] = t.dim_size(0);
  }
  return absl::OkStatus();
}

void ReadGatherAttrs(tensorflow::OpKernelConstruction* c, bool with_root, GatherAttrs* a) {
  OP_REQUIRES_OK(c, c->GetAttr("num_devices", &a->num_devices));
  if (with_root) OP_REQUIRES_OK(c, c->GetAttr("root_rank", &a->root));
  OP_REQUIRES_OK(c, c->GetAttr("comm_handle", &a->comm_handle));
  OP_REQUIRES_OK(c, c->GetAttr("timeout_seconds", &a->timeout));
  OP_REQUIRES_OK(c, c->GetAttr("instance_key", &a->instance_key));
}

}  // namespace tf
}  // namespace pytfcomm
