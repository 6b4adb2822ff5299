// Element types and reduction operators understood by the core.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pytfcomm {

// Wire values: these numbers travel in frame headers and across the Python
// boundary, so never renumber them; append new types before kCount.
enum class DType : uint8_t {
  kFloat16 = 0,
  kBFloat16 = 1,
  kFloat32 = 2,
  kFloat64 = 3,
  kInt8 = 4,
  kUInt8 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kBool = 8,
  kCount = 9,
};

// Wire values as above. kMean is a sum followed by a division by the number
// of contributions (truncating toward zero for integer types).
enum class ReduceOp : uint8_t {
  kSum = 0,
  kMean = 1,
  kMin = 2,
  kMax = 3,
  kProd = 4,
  kCount = 5,
};

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kFloat64:
    case DType::kInt64:
      return 8;
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kBool:
      return 1;
    default:
      return 0;
  }
}

inline const char* dtype_name(DType t) {
  static const char* kNames[] = {"float16", "bfloat16", "float32", "float64", "int8",
                                 "uint8",   "int32",    "int64",   "bool"};
  auto i = static_cast<size_t>(t);
  return i < static_cast<size_t>(DType::kCount) ? kNames[i] : "invalid";
}

inline const char* op_name(ReduceOp op) {
  static const char* kNames[] = {"sum", "mean", "min", "max", "prod"};
  auto i = static_cast<size_t>(op);
  return i < static_cast<size_t>(ReduceOp::kCount) ? kNames[i] : "invalid";
}

inline bool valid_dtype(uint8_t v) { return v < static_cast<uint8_t>(DType::kCount); }
inline bool valid_op(uint8_t v) { return v < static_cast<uint8_t>(ReduceOp::kCount); }

}  // namespace pytfcomm
