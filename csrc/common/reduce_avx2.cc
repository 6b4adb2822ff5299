// AVX2/F16C kernel set. Built with -mavx2 -mfma -mf16c -ffp-contract=off
// (set for this file only by CMake): contraction off so that no a*b+c can
// become an FMA here and round differently from the generic build. Only
// reduce.cc's run-time check decides whether this code runs, so this file
// uses no inline or template code from shared headers (no error.h, no
// dtype_size): the linker could pick such an AVX2-compiled copy for
// everyone. The float16/bfloat16 loops use intrinsics; everything else is the
// shared code of reduce_kernels.h, auto-vectorised with AVX2.
#if defined(__x86_64__)

#include <immintrin.h>

#define PTC_REDUCE_NS reduce_avx2
#include "common/reduce_kernels.h"
#include "common/reduce_internal.h"

namespace pytfcomm {
namespace reduce_avx2 {
namespace {

// 8 lanes of 16-bit floats <-> __m256 of float32, same results as the
// scalar Half/BFloat16 conversions.
template <class Fmt>
struct Vec8;

template <>
struct Vec8<Half> {
  static __m256 load(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static void store(uint16_t* p, __m256 v) {
    // Explicit RNE, independent of MXCSR's rounding mode.
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
};

template <>
struct Vec8<BFloat16> {
  typedef uint32_t U32x8 __attribute__((vector_size(32)));

  static __m256 load(const uint16_t* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static void store(uint16_t* p, __m256 v) {
    // Same rounding expression as the scalar path, on 8 lanes at once.
    const __m256i r = reinterpret_cast<__m256i>(
        BFloat16::round_bits(reinterpret_cast<U32x8>(_mm256_castps_si256(v))));
    // Lanes hold 0..0xffff, so unsigned saturation is a plain narrowing;
    // packus works per 128-bit half, the permute puts 0..7 in order.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
};

struct Avx2Loops16 {
  template <class Fmt, class F>
  static void binary(uint16_t* d, const uint16_t* a, const uint16_t* b, size_t n, F f) {
    using V = Vec8<Fmt>;
    size_t i = 0;
    // Loads of a and b precede the store of each block, so dst == a or b is fine.
    for (; i + 8 <= n; i += 8) V::store(d + i, f(V::load(a + i), V::load(b + i)));
    if (i < n) {
      // The tail goes through the same vector code (padded with zeros) so
      // that every element is converted by the same instructions.
      uint16_t ta[8] = {}, tb[8] = {}, td[8];
      const size_t bytes = (n - i) * sizeof(uint16_t);
      std::memcpy(ta, a + i, bytes);
      std::memcpy(tb, b + i, bytes);
      V::store(td, f(V::load(ta), V::load(tb)));
      std::memcpy(d + i, td, bytes);
    }
  }

  template <class Fmt, class F>
  static void unary(uint16_t* d, const uint16_t* s, size_t n, F f) {
    using V = Vec8<Fmt>;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) V::store(d + i, f(V::load(s + i)));
    if (i < n) {
      uint16_t ts[8] = {}, td[8];
      const size_t bytes = (n - i) * sizeof(uint16_t);
      std::memcpy(ts, s + i, bytes);
      V::store(td, f(V::load(ts)));
      std::memcpy(d + i, td, bytes);
    }
  }
};

using Avx2Dispatch = Dispatch<Avx2Loops16>;

}  // namespace
}  // namespace reduce_avx2

namespace reduce_internal {

const Kernels kAvx2Kernels = {"avx2", &reduce_avx2::Avx2Dispatch::reduce,
                              &reduce_avx2::Avx2Dispatch::reduce_divide,
                              &reduce_avx2::Avx2Dispatch::divide};

}  // namespace reduce_internal
}  // namespace pytfcomm

#endif  // defined(__x86_64__)
