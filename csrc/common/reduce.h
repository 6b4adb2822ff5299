// Element-wise reduction kernels. Vectorised (AVX2/F16C chosen at run time
// when the CPU has them); float16 and bfloat16 are computed in float32 and
// rounded once per call, so every rank that calls with the same inputs gets
// bitwise-identical outputs.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"

namespace pytfcomm {

// dst[i] = a[i] op b[i] for i in [0, n). dst may be the same pointer as a or
// b; partial overlap is not allowed. kMean reduces like kSum here (the
// division happens once, in reduce_divide/divide). Integer sum and prod wrap
// modulo 2^bits; bool sum/max are logical or, prod/min logical and. min/max
// propagate NaN like numpy.minimum/maximum.
void reduce(void* dst, const void* a, const void* b, size_t n, DType dtype, ReduceOp op);

// dst[i] = (a[i] + b[i]) / divisor: the last step of a mean, fused so that
// float16/bfloat16 round once. Integers truncate toward zero.
void reduce_divide(void* dst, const void* a, const void* b, size_t n, DType dtype, int64_t divisor);

// dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[m-1][i] for m >= 1 sources, combined
// left to right; with mean_divisor > 0 (kSum/kMean only) the result is divided by it, in
// the last step as reduce_divide does. Bit for bit the pairwise chain over the same
// sources (reduce(dst, srcs[0], srcs[1]), reduce(dst, dst, srcs[2]), ...), but sums of
// 32/64-bit types read all sources in one pass and write dst once. dst may equal srcs[0];
// it must not overlap any other source. `stream` writes such sums of up to four sources with
// non-temporal stores (same bytes): for outputs too large to stay in cache anyway, where
// it saves reading every destination line first; dst is complete when the call returns.
void reduce_many(void* dst, const void* const* srcs, size_t m, size_t n, DType dtype, ReduceOp op,
                 int64_t mean_divisor, bool stream = false);

// dst[i] = src[i] / divisor (dst may equal src).
void divide(void* dst, const void* src, size_t n, DType dtype, int64_t divisor);

// Name of the kernel set picked for this CPU ("avx2" or "generic"), for `info`.
const char* reduce_isa();

}  // namespace pytfcomm
