// What every pytfcomm kernel shares, whatever its device: the attrs, the
// argument checks, the local-only shortcuts and the outputs that every
// replica shares. The kernels themselves (tf/comm_kernels.h) are templates
// on the device, TF's custom-op Functor<Device> pattern; a device's functors
// only move the data.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tf/op_attrs.h"
#include "tf/tf_common.h"

namespace pytfcomm {
namespace tf {

// The kernels' `Device`. TF's guide uses Eigen's device types; Eigen's GPU
// one needs CUDA headers, which the op library does without.
struct CPUDevice {};
struct GPUDevice {};

// Every pytfcomm kernel: the op's attrs, read at construction.
class CommKernel : public AsyncOpKernel {
 public:
  explicit CommKernel(OpKernelConstruction* c) : AsyncOpKernel(c) { ReadOpAttrs(c, &a_); }

 protected:
  OpAttrs a_;
};

// A checked PytfcommAllReduce: inputs are num_devices replicas of M tensors,
// replica i's tensor j at input i * M + j.
struct AllReduceArgs {
  std::shared_ptr<Communicator> comm;  // null without one
  bool cross = false;                  // other processes take part
  std::vector<DType> dtypes;           // of tensors 0..M-1
  int m = 0;
};

// Inputs a multiple of num_devices, the communicator the op names, a
// reducible dtype of each tensor, every replica alike at each position.
absl::Status CheckAllReduce(OpKernelContext* ctx, const OpAttrs& a, AllReduceArgs* args);

// A PytfcommBroadcast with other processes taking part, its output allocated.
struct BroadcastArgs {
  std::shared_ptr<Communicator> comm;
  DType dtype = DType::kFloat32;
  Tensor in, out;  // `out` is every replica's output
};
// The dtype, and the root below the job's size.
absl::Status CheckBroadcast(OpKernelContext* ctx, const OpAttrs& a, BroadcastArgs* args);

// A checked PytfcommAllGather: every replica of rank >= 1 and of one shape after dimension 0.
struct AllGatherArgs {
  std::shared_ptr<Communicator> comm;  // null when no other process takes part
  DType dtype = DType::kFloat32;
  TensorShape row;              // a replica's shape after dimension 0
  std::vector<int64_t> counts;  // each replica's dimension 0
  int64_t rows = 0;             // their sum
};
absl::Status CheckAllGather(OpKernelContext* ctx, const OpAttrs& a, AllGatherArgs* args);

// TF's aligned Eigen maps assume every tensor's data at a multiple of this.
constexpr int64_t kTensorAlign = 64;  // EIGEN_MAX_ALIGN_BYTES of the pip build
inline int64_t AlignUp(int64_t v) { return (v + kTensorAlign - 1) / kTensorAlign * kTensorAlign; }

// A digest of a dtype and a shape (of one row, or of a whole tensor) for a
// request's shape_tag, never 0 (0: no shape): ranks whose tags differ get a
// mismatch on every rank instead of moving unrelated bytes.
uint32_t ShapeTag(tensorflow::DataType dtype, const TensorShape& shape);
// The same of a list of shapes (in order).
uint32_t ShapeTag(tensorflow::DataType dtype, const std::vector<TensorShape>& shapes);

// The shape of `total` received elements as whole rows of `row` (which has
// elements); Internal when they are not whole rows (ranks whose shape tags
// agreed cannot send that). `what` names the op.
absl::Status WholeRows(const char* what, uint64_t total, const TensorShape& row, TensorShape* out);

// Where the tensor every replica gets as its output lives.
enum class SharedOutput {
  kCachedHost,  // the cached host buffers of output_buffer.h (CPU kernels)
  kOpDevice,    // TF's allocator for output 0, on the op's device (GPU kernels)
};
// One tensor of `shape` as outputs 0..num_devices-1.
absl::Status AllocateSharedOutput(OpKernelContext* ctx, const OpAttrs& a, SharedOutput where,
                                  tensorflow::DataType dtype, const TensorShape& shape,
                                  Tensor* out);

// Every output j is input j (nothing to combine or send).
void ForwardInputs(OpKernelContext* ctx);

// The device parts, specialized by each device's source (allreduce_kernel.cc
// and gather_kernels.cc for CPU, gpu_kernels.cc for GPU), each a struct with
//   void operator()(OpKernelContext* ctx, AsyncOpKernel::DoneCallback done,
//                   const OpAttrs& a, <Op>Args args) const;
// which sets the outputs not set yet, moves the data and calls done(), with
// the op's status set on failure (no exception leaves it). Besides,
//   AllReduceFunctor: static absl::Status CheckAttrs(const OpAttrs&), what
//     the device cannot run (checked at construction); it runs after the
//     local-only shortcut;
//   BroadcastFunctor: static constexpr SharedOutput kOutput, where the
//     output it gets lives.
template <typename Device>
struct AllReduceFunctor;
template <typename Device>
struct BroadcastFunctor;
template <typename Device>
struct AllGatherFunctor;

}  // namespace tf
}  // namespace pytfcomm
