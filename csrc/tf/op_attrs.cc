#include "tf/op_attrs.h"

#include <utility>

namespace pytfcomm {
namespace tf {
namespace {

constexpr std::pair<tensorflow::DataType, DType> kTypes[] = {
    {tensorflow::DT_HALF, DType::kFloat16},  {tensorflow::DT_BFLOAT16, DType::kBFloat16},
    {tensorflow::DT_FLOAT, DType::kFloat32}, {tensorflow::DT_DOUBLE, DType::kFloat64},
    {tensorflow::DT_INT8, DType::kInt8},     {tensorflow::DT_UINT8, DType::kUInt8},
    {tensorflow::DT_INT32, DType::kInt32},   {tensorflow::DT_INT64, DType::kInt64},
    {tensorflow::DT_BOOL, DType::kBool}};
static_assert(std::size(kTypes) == static_cast<size_t>(DType::kCount), "a TF dtype per DType");

// The code an attr names; InvalidArgument, with the valid names, for none.
template <typename Code>
absl::Status ParseCode(tensorflow::OpKernelConstruction* c, const char* attr, Code* out) {
  std::string name;
  TF_RETURN_IF_ERROR(c->GetAttr(attr, &name));
  if (code_of(name, out)) return absl::OkStatus();
  return absl::InvalidArgumentError("pytfcomm: " + std::string(attr) + " '" + name +
                                    "' is not one of " + code_names<Code>());
}

// Reads `attr` into `out` when the op has it.
template <typename T>
absl::Status ReadIfPresent(tensorflow::OpKernelConstruction* c, const char* attr, T* out) {
  return c->HasAttr(attr) ? c->GetAttr(attr, out) : absl::OkStatus();
}

}  // namespace

bool ToDType(tensorflow::DataType t, DType* out) {
  for (const auto& [tf_type, dtype] : kTypes) {
    if (tf_type == t) {
      *out = dtype;
      return true;
    }
  }
  return false;
}

std::string TypeAttr(bool list) {
  std::string types;
  for (const auto& [tf_type, dtype] : kTypes) {
    if (!types.empty()) types += ", ";
    types += tensorflow::DataTypeString(tf_type);
  }
  return list ? "T: list({" + types + "})" : "T: {" + types + "}";
}

void ReadOpAttrs(tensorflow::OpKernelConstruction* c, OpAttrs* a) {
  OP_REQUIRES_OK(c, c->GetAttr("num_devices", &a->num_devices));
  OP_REQUIRES_OK(c, c->GetAttr("comm_handle", &a->comm_handle));
  OP_REQUIRES_OK(c, c->GetAttr("timeout_seconds", &a->timeout));
  OP_REQUIRES_OK(c, c->GetAttr("instance_key", &a->instance_key));
  OP_REQUIRES_OK(c, ReadIfPresent(c, "root_rank", &a->root));
  if (c->HasAttr("reduce_op")) OP_REQUIRES_OK(c, ParseCode(c, "reduce_op", &a->op));
  if (c->HasAttr("algorithm")) OP_REQUIRES_OK(c, ParseCode(c, "algorithm", &a->algorithm));
  OP_REQUIRES_OK(c, ReadIfPresent(c, "fusion_threshold_bytes", &a->fusion_threshold));
  OP_REQUIRES_OK(c, ReadIfPresent(c, "group_size", &a->group_size));
  OP_REQUIRES_OK(c, ReadIfPresent(c, "group_rank", &a->group_rank));
  OP_REQUIRES_OK(c, ReadIfPresent(c, "group_key", &a->group_key));
}

}  // namespace tf
}  // namespace pytfcomm
