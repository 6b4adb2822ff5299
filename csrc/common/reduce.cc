// Public reduction entry points: argument checks, then the kernel set picked
// once per process for this CPU (see reduce_internal.h).
#include "common/reduce.h"

#include <cstring>

#include "common/error.h"
#include "common/param.h"
#include "common/reduce_internal.h"

namespace pytfcomm {
namespace reduce_internal {

bool cpu_has_avx2() {
#if defined(__x86_64__)
  // FMA too, because reduce_avx2.cc is compiled with -mfma (every CPU with
  // AVX2 and F16C that we know of has it).
  static const bool has = [] {
    __builtin_cpu_init();  // in case we run before libgcc's constructor did
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") &&
           __builtin_cpu_supports("fma");
  }();
  return has;
#else
  return false;
#endif
}

const Kernels& active_kernels() {
  // Decided once: the choice must not change under a running collective.
  static const Kernels& picked = []() -> const Kernels& {
    const bool force_generic = read_param(ParamId::reduce_isa).text == "generic";
#if defined(__x86_64__)
    if (!force_generic && cpu_has_avx2()) return kAvx2Kernels;
#else
    (void)force_generic;
#endif
    return kGenericKernels;
  }();
  return picked;
}

}  // namespace reduce_internal

namespace {

void check_dtype(DType dtype) {
  PTC_CHECK_ARG(valid_dtype(static_cast<uint8_t>(dtype)), "invalid dtype ",
                static_cast<int>(dtype));
}

void check_divide_args(DType dtype, int64_t divisor) {
  check_dtype(dtype);
  PTC_CHECK_ARG(dtype != DType::kBool, "mean is not supported for dtype bool");
  PTC_CHECK_ARG(divisor >= 1, "divisor must be >= 1, got ", divisor);
}

}  // namespace

void reduce(void* dst, const void* a, const void* b, size_t n, DType dtype, ReduceOp op) {
  check_dtype(dtype);
  PTC_CHECK_ARG(valid_op(static_cast<uint8_t>(op)), "invalid reduce op ", static_cast<int>(op));
  if (n == 0) return;
  PTC_CHECK_ARG(dst != nullptr && a != nullptr && b != nullptr, "null buffer in reduce");
  reduce_internal::active_kernels().reduce(dst, a, b, n, dtype, op);
}

void reduce_divide(void* dst, const void* a, const void* b, size_t n, DType dtype,
                   int64_t divisor) {
  check_divide_args(dtype, divisor);
  if (n == 0) return;
  PTC_CHECK_ARG(dst != nullptr && a != nullptr && b != nullptr, "null buffer in reduce_divide");
  reduce_internal::active_kernels().reduce_divide(dst, a, b, n, dtype, divisor);
}

void reduce_many(void* dst, const void* const* srcs, size_t m, size_t n, DType dtype, ReduceOp op,
                 int64_t mean_divisor, bool stream) {
  check_dtype(dtype);
  PTC_CHECK_ARG(valid_op(static_cast<uint8_t>(op)), "invalid reduce op ", static_cast<int>(op));
  PTC_CHECK_ARG(m >= 1, "reduce_many needs at least one source");
  PTC_CHECK_ARG(mean_divisor >= 0, "divisor must be >= 0, got ", mean_divisor);
  if (mean_divisor > 0) {
    PTC_CHECK_ARG(op == ReduceOp::kSum || op == ReduceOp::kMean, "only a sum or mean divides");
    check_divide_args(dtype, mean_divisor);
  }
  if (n == 0) return;
  PTC_CHECK_ARG(dst != nullptr && srcs != nullptr, "null buffer in reduce_many");
  for (size_t r = 0; r < m; ++r) PTC_CHECK_ARG(srcs[r] != nullptr, "null buffer in reduce_many");
  if (m == 1) {
    if (mean_divisor > 0) return divide(dst, srcs[0], n, dtype, mean_divisor);
    if (dst != srcs[0]) std::memcpy(dst, srcs[0], n * dtype_size(dtype));
    return;
  }
  reduce_internal::active_kernels().reduce_many(dst, srcs, m, n, dtype, op, mean_divisor, stream);
}

void divide(void* dst, const void* src, size_t n, DType dtype, int64_t divisor) {
  check_divide_args(dtype, divisor);
  if (n == 0) return;
  PTC_CHECK_ARG(dst != nullptr && src != nullptr, "null buffer in divide");
  reduce_internal::active_kernels().divide(dst, src, n, dtype, divisor);
}

const char* reduce_isa() { return reduce_internal::active_kernels().name; }

}  // namespace pytfcomm
