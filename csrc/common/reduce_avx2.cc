// AVX2/F16C kernel set. Built with -mavx2 -mfma -mf16c -ffp-contract=off
// (set for this file only by CMake): contraction off so that no a*b+c can
// become an FMA here and round differently from the generic build. Only
// reduce.cc's run-time check decides whether this code runs, so this file
// uses no inline or template code from shared headers (no error.h, no
// dtype_size): the linker could pick such an AVX2-compiled copy for
// everyone. float16 converts with F16C; everything else is the shared code
// of reduce_kernels.h, vectorised with AVX2.
#if defined(__x86_64__)

#include <immintrin.h>

#define PTC_REDUCE_NS reduce_avx2
#define PTC_REDUCE_VEC_BYTES 32  // AVX2 width: 8 lanes, as F16C converts
#include "common/reduce_internal.h"
#include "common/reduce_kernels.h"

namespace pytfcomm {
namespace reduce_avx2 {
namespace {

template <class Fmt>
struct Avx2Vec;

// Same results as PortableVec<Half> (see Half), one instruction each way.
template <>
struct Avx2Vec<Half> {
  static constexpr int kVecs = 1;
  static Block<1> load(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return {{reinterpret_cast<F32xN>(_mm256_cvtph_ps(h))}};
  }
  static void store(uint16_t* p, const Block<1>& x) {
    // Explicit RNE, independent of MXCSR's rounding mode.
    const __m128i h = _mm256_cvtps_ph(reinterpret_cast<__m256>(x.v[0]), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
  }
};

// bfloat16 needs no special instructions: PortableVec's integer ops.
template <>
struct Avx2Vec<BFloat16> : PortableVec<BFloat16> {};

using Avx2Set = KernelSet<Avx2Vec>;

}  // namespace
}  // namespace reduce_avx2

namespace reduce_internal {

const Kernels kAvx2Kernels = {"avx2", &reduce_avx2::Avx2Set::reduce,
                              &reduce_avx2::Avx2Set::reduce_divide, &reduce_avx2::Avx2Set::divide,
                              &reduce_avx2::Avx2Set::reduce_many};

}  // namespace reduce_internal
}  // namespace pytfcomm

#endif  // defined(__x86_64__)
