// Registration of pytfcomm's TensorFlow ops (kernels live in *_kernel.cc).
//
// Every op takes the tensors of all N local replicas at once (input i*M + j
// is tensor j of replica i) and returns N*M outputs in the same layout, so
// one op execution combines a whole batch in-process. With comm_handle > 0
// the combined result also goes through that pytfcomm Communicator (one
// collective per fusion buffer) before it is handed to every replica.
//
// The ops are stateful: they may talk to other processes, and TF must
// neither constant-fold nor deduplicate them (that would silently skip
// pytfcomm). Across processes an op's collectives are matched by its
// instance_key (set by the Python layer: the op's place in its outermost
// traced function, or the calling thread for eager ops) and the frame and
// iteration it runs in, never by the order TF happens to run ops in
// (docs/negotiation.md).
// They are marked as distributed communication so that TF passes their
// Unavailable errors (a lost peer) to the caller instead of turning them
// into Internal ones.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tf/op_attrs.h"

// What every pytfcomm op is (see above) and the attrs every one has; the
// type and code attrs come from the core's tables (tf/op_attrs.h).
#define REGISTER_PYTFCOMM_OP(name)        \
  REGISTER_OP(name)                       \
      .Attr("num_devices: int >= 1")      \
      .Attr("comm_handle: int = 0")       \
      .Attr("timeout_seconds: float = 0") \
      .Attr("instance_key: string = ''")  \
      .SetIsStateful()                    \
      .SetIsDistributedCommunication()

namespace {

using ::pytfcomm::Algorithm;
using ::pytfcomm::ReduceOp;
using ::pytfcomm::tf::CodeAttr;
using ::pytfcomm::tf::TypeAttr;
using ::tensorflow::shape_inference::InferenceContext;

// Output k has the shape of input k.
absl::Status SameShapes(InferenceContext* c) {
  int n = 0;
  TF_RETURN_IF_ERROR(c->GetAttr("num_devices", &n));
  if (c->num_inputs() % n != 0) {
    return absl::InvalidArgumentError("the number of inputs must be a multiple of num_devices");
  }
  for (int i = 0; i < c->num_inputs(); ++i) c->set_output(i, c->input(i));
  return absl::OkStatus();
}

}  // namespace

REGISTER_PYTFCOMM_OP("PytfcommAllReduce")
    .Input("inputs: T")
    .Output("outputs: T")
    .Attr(TypeAttr(true))
    .Attr(CodeAttr("reduce_op", ReduceOp::kSum))
    .Attr("fusion_threshold_bytes: int >= 0 = 4194304")
    .Attr(CodeAttr("algorithm", Algorithm::kAuto))
    .Attr("group_size: int >= 1 = 1")
    .Attr("group_rank: int >= 0 = 0")
    .Attr("group_key: int = 0")
    .SetShapeFn(SameShapes)
    .Doc(R"doc(
All-reduce of the same M tensors on N local replicas (and, with comm_handle,
across the processes of a pytfcomm Communicator). Input i*M+j is tensor j of
replica i; every replica gets bitwise-identical outputs. Tensors smaller
than fusion_threshold_bytes are fused into shared buffers.
On GPUs every replica runs its own op (num_devices = 1): group_size ops with
one group_key, op group_rank on GPU group_rank, reduce together over NCCL.
)doc");

REGISTER_PYTFCOMM_OP("PytfcommBroadcast")
    .Input("input: T")
    .Output("outputs: num_devices * T")
    .Attr(TypeAttr(false))
    .Attr("root_rank: int >= 0 = 0")
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, c->input(0));
      return absl::OkStatus();
    })
    .Doc(R"doc(
The input (from process root_rank when comm_handle is set) on every one of
num_devices outputs; on CPU all outputs share one buffer.
)doc");

REGISTER_PYTFCOMM_OP("PytfcommAllGather")
    .Input("inputs: num_devices * T")
    .Output("outputs: num_devices * T")
    .Attr(TypeAttr(false))
    .SetShapeFn([](InferenceContext* c) {
      // Dimension 0 is the sum over replicas (and processes); the rest must agree.
      ::tensorflow::shape_inference::ShapeHandle rest;
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(0), 1, &rest));
      TF_RETURN_IF_ERROR(c->Subshape(c->input(0), 1, &rest));
      for (int i = 1; i < c->num_inputs(); ++i) {
        ::tensorflow::shape_inference::ShapeHandle in, tail;
        TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(i), 1, &in));
        TF_RETURN_IF_ERROR(c->Subshape(in, 1, &tail));
        TF_RETURN_IF_ERROR(c->Merge(rest, tail, &rest));
      }
      ::tensorflow::shape_inference::ShapeHandle out;
      TF_RETURN_IF_ERROR(c->Concatenate(c->Vector(c->UnknownDim()), rest, &out));
      for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, out);
      return absl::OkStatus();
    })
    .Doc(R"doc(
Concatenation along dimension 0 of every replica's input (replica order, then
process rank order when comm_handle is set), on every one of num_devices outputs.
)doc");

// Output i: input i's shape with dimension 0 unknown (it depends on the
// job's size and this process's rank).
namespace {
absl::Status RowsOfInput(InferenceContext* c, int i) {
  ::tensorflow::shape_inference::ShapeHandle rest, out;
  TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(i), 1, &rest));
  TF_RETURN_IF_ERROR(c->Subshape(c->input(i), 1, &rest));
  TF_RETURN_IF_ERROR(c->Concatenate(c->Vector(c->UnknownDim()), rest, &out));
  c->set_output(i, out);
  return absl::OkStatus();
}
}  // namespace

REGISTER_PYTFCOMM_OP("PytfcommReduceScatter")
    .Input("inputs: N * T")
    .Output("outputs: N * T")
    .Attr("N: int >= 1")
    .Attr(TypeAttr(false))
    .Attr(CodeAttr("reduce_op", ReduceOp::kSum))
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 0; i < c->num_inputs(); ++i) TF_RETURN_IF_ERROR(RowsOfInput(c, i));
      return absl::OkStatus();
    })
    .Doc(R"doc(
The reduction over the processes of a pytfcomm communicator of every
process's N tensors (the same shapes on each), each split along dimension 0:
of R rows on P processes, rank r gets R / P rows, the first R % P ranks one
more, in rank order (Horovod's split). The tensors travel in one collective.
One process's tensors per op (num_devices = 1).
)doc");

REGISTER_PYTFCOMM_OP("PytfcommAlltoall")
    .Input("input: T")
    .Input("splits: int64")
    .Output("output: T")
    .Output("received_splits: int64")
    .Attr(TypeAttr(false))
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(RowsOfInput(c, 0));
      ::tensorflow::shape_inference::ShapeHandle splits;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &splits));
      c->set_output(1, splits);
      return absl::OkStatus();
    })
    .Doc(R"doc(
All-to-all along dimension 0 across the processes of a pytfcomm communicator,
whose rank i gets splits[i] rows of the input (in order). The output is what
every rank sent this one, in rank order; received_splits[i] the rows that
came from rank i. Dimensions after the first must agree on every rank.
)doc");
