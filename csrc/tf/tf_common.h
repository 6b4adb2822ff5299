// What every pytfcomm kernel needs at the TF boundary: dtype mapping,
// pytfcomm::Error -> tf status mapping, and the lookup of the communicator
// an op names. Nothing here throws.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "engine/communicator.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace pytfcomm {
namespace tf {

// The core's dtype for a TF dtype; false for types the core cannot reduce.
bool ToDType(tensorflow::DataType t, DType* out);

// The core's values of the ops' reduce_op and algorithm attrs (already
// validated by the op registration).
ReduceOp ParseReduceOp(const std::string& s);
Algorithm ParseAlgorithm(const std::string& s);

// Runs body(); a pytfcomm::Error becomes the matching status (kPeerLost ->
// Unavailable, kTimeout -> DeadlineExceeded, kMismatch/kClosed ->
// FailedPrecondition, kInvalidArgument/kConfig -> InvalidArgument, others
// -> Internal); any other exception becomes Internal. `what` names the op.
absl::Status Guard(const char* what, const std::function<void()>& body);
// The same mapping for an outcome the engine reported (null: OK).
absl::Status StatusOf(const char* what, std::exception_ptr error);

// The communicator registered under `handle`, or an InvalidArgument status.
absl::Status FindComm(int64_t handle, std::shared_ptr<Communicator>* out);

// The attrs of the broadcast and all-gather ops, read alike by their CPU and
// GPU kernels (root only for broadcast). A failure is set on `c`.
struct GatherAttrs {
  int num_devices = 1;
  int root = 0;
  int64_t comm_handle = 0;
  float timeout = 0;
  std::string instance_key;
};
void ReadGatherAttrs(tensorflow::OpKernelConstruction* c, bool with_root, GatherAttrs* a);

// A broadcast's input dtype (as the core's) and root (below the job's size),
// checked alike by the CPU and GPU kernels.
absl::Status CheckBroadcast(const tensorflow::Tensor& in, const Communicator& comm, int root,
                            DType* dt);

// The all-gather ops' inputs 0..n-1: each of rank >= 1, all of one shape
// after dimension 0 (`row`); `rows[i]` gets replica i's dimension 0.
absl::Status GatherRows(tensorflow::OpKernelContext* ctx, int n, tensorflow::TensorShape* row,
                        std::vector<int64_t>* rows);

// Timeout attr (<= 0: the communicator's default) in the core's convention.
inline double CoreTimeout(float seconds) { return seconds > 0 ? seconds : -1.0; }

}  // namespace tf
}  // namespace pytfcomm
