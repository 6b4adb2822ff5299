// Per-ISA entry points behind reduce.h, exposed so that tests can run the
// generic and AVX2 kernel sets side by side and compare them bitwise. Code
// outside reduce*.cc and tests should use reduce.h instead.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"

namespace pytfcomm {
namespace reduce_internal {

// One compiled kernel set. Preconditions (checked by the public functions in
// reduce.h, not here, so that the AVX2 translation unit needs no error
// machinery): dtype and op valid, divisor >= 1, no bool in the divide
// functions, pointers non-null when n > 0, dst equal to or disjoint from
// each source.
struct Kernels {
  const char* name;
  void (*reduce)(void* dst, const void* a, const void* b, size_t n, DType dtype, ReduceOp op);
  void (*reduce_divide)(void* dst, const void* a, const void* b, size_t n, DType dtype,
                        int64_t divisor);
  void (*divide)(void* dst, const void* src, size_t n, DType dtype, int64_t divisor);
  // m >= 2 sources; divisor 0 (no division) or >= 1 (sum/mean only).
  void (*reduce_many)(void* dst, const void* const* srcs, size_t m, size_t n, DType dtype,
                      ReduceOp op, int64_t divisor, bool stream);
};

// Baseline kernels, always available.
extern const Kernels kGenericKernels;

#if defined(__x86_64__)
// AVX2/F16C kernels; only call them when cpu_has_avx2() is true.
extern const Kernels kAvx2Kernels;
#endif

// True when this CPU can run kAvx2Kernels (AVX2, F16C and FMA present).
bool cpu_has_avx2();

// The set reduce.h uses: AVX2 when the CPU has it, unless the environment
// variable PYTFCOMM_REDUCE_ISA=generic was set when first called.
const Kernels& active_kernels();

}  // namespace reduce_internal
}  // namespace pytfcomm
