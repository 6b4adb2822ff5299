// Element types and reduction operators understood by the core.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/code_table.h"

namespace pytfcomm {

// X(enumerator, wire value, name, bytes per element). Wire values travel in
// frame headers and across the Python boundary: never renumber them, append
// new types at the end. A name is also the type's NumPy name (bfloat16:
// ml_dtypes').
#define PTC_DTYPES(X)            \
  X(kFloat16, 0, "float16", 2)   \
  X(kBFloat16, 1, "bfloat16", 2) \
  X(kFloat32, 2, "float32", 4)   \
  X(kFloat64, 3, "float64", 8)   \
  X(kInt8, 4, "int8", 1)         \
  X(kUInt8, 5, "uint8", 1)       \
  X(kInt32, 6, "int32", 4)       \
  X(kInt64, 7, "int64", 8)       \
  X(kBool, 8, "bool", 1)

// X(enumerator, wire value, name), as above.
#define PTC_REDUCE_OPS(X)                                                   \
  X(kSum, 0, "sum")                                                         \
  X(kMean, 1, "mean") /* the sum / contributions (integers: toward zero) */ \
  X(kMin, 2, "min")                                                         \
  X(kMax, 3, "max")                                                         \
  X(kProd, 4, "prod")

enum class DType : uint8_t { PTC_DTYPES(PTC_CODE_ENUMERATOR) kCount };
enum class ReduceOp : uint8_t { PTC_REDUCE_OPS(PTC_CODE_ENUMERATOR) kCount };
PTC_CODE_TABLE(DType, PTC_DTYPES);
PTC_CODE_TABLE(ReduceOp, PTC_REDUCE_OPS);
static_assert(codes_are_dense<DType>() && codes_are_dense<ReduceOp>(), "kCount bounds the codes");

inline size_t dtype_size(DType t) {
#define PTC_DTYPE_SIZE(id, value, name, bytes) \
  case DType::id:                              \
    return bytes;
  switch (t) {
    PTC_DTYPES(PTC_DTYPE_SIZE)
    default:
      return 0;
  }
#undef PTC_DTYPE_SIZE
}

inline const char* dtype_name(DType t) { return code_name(t); }
inline const char* op_name(ReduceOp op) { return code_name(op); }

inline bool valid_dtype(uint8_t v) { return v < static_cast<uint8_t>(DType::kCount); }
inline bool valid_op(uint8_t v) { return v < static_cast<uint8_t>(ReduceOp::kCount); }

}  // namespace pytfcomm
