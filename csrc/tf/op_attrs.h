// The attrs of pytfcomm's TF ops, declared (ops.cc) and read (the kernels)
// from the core's code tables, so that an op accepts exactly the dtypes,
// reduce ops and algorithms the core has, under the core's names.
#pragma once

#include <cstdint>
#include <string>

#include "common/algorithm.h"
#include "common/code_table.h"
#include "common/dtype.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace pytfcomm {
namespace tf {

// The core's dtype for a TF dtype; false for types the core cannot reduce.
bool ToDType(tensorflow::DataType t, DType* out);

// REGISTER_OP spec of the type attr T: every TF dtype ToDType knows, one
// type ("T: {half, ...}") or a list of them ("T: list({half, ...})").
std::string TypeAttr(bool list);

// REGISTER_OP spec of an attr naming a code: "reduce_op: {'sum', ...} = 'sum'".
template <typename Code>
std::string CodeAttr(const char* attr, Code default_value) {
  return std::string(attr) + ": {" + code_names<Code>("'") + "} = '" + code_name(default_value) +
         "'";
}

// The attrs of an op, each as its kernel uses it; an attr the op does not
// have keeps its default. Every op has num_devices, comm_handle,
// timeout_seconds and instance_key.
struct OpAttrs {
  int num_devices = 1;
  int64_t comm_handle = 0;
  float timeout = 0;  // <= 0: the communicator's default
  std::string instance_key;
  int root = 0;                            // broadcast
  ReduceOp op = ReduceOp::kSum;            // all-reduce
  Algorithm algorithm = Algorithm::kAuto;  // all-reduce
  int64_t fusion_threshold = 0;            // all-reduce
  int group_size = 1, group_rank = 0;      // all-reduce (GPU)
  int64_t group_key = 0;                   // all-reduce (GPU)

  // The timeout in the core's convention (-1: the communicator's default).
  double core_timeout() const { return timeout > 0 ? timeout : -1.0; }
};

// Reads the op's attrs; a failure (a name no code has, say) is set on `c`.
void ReadOpAttrs(tensorflow::OpKernelConstruction* c, OpAttrs* a);

}  // namespace tf
}  // namespace pytfcomm
