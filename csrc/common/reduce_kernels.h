// The element-wise math behind reduce.h, written once and compiled twice, by
// reduce_generic.cc (baseline flags) and reduce_avx2.cc (AVX2), which must
// agree bit for bit: ranks of one job may run on different CPUs. Textual
// include for those two only; each first defines PTC_REDUCE_NS, so that its
// template instantiations get their own symbols (with shared ones the linker
// would keep one copy, maybe the AVX2 one, for both), and
// PTC_REDUCE_VEC_BYTES, the vector width its ISA handles natively (GCC
// splits wider generic vectors poorly, comparisons into scalar code).
// Operators are templates over the value type, so one expression serves a
// scalar (float, int8_t, ...) and a GCC vector: the per-op math lives here.
#pragma once

#if !defined(PTC_REDUCE_NS) || !defined(PTC_REDUCE_VEC_BYTES)
#error "define PTC_REDUCE_NS and PTC_REDUCE_VEC_BYTES before including reduce_kernels.h"
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "common/dtype.h"

namespace pytfcomm {
namespace PTC_REDUCE_NS {

// GCC vector extensions: portable (SSE2, AVX2, NEON or plain scalar code,
// whatever the target offers).
constexpr size_t kLanes = PTC_REDUCE_VEC_BYTES / 4;
typedef float F32xN __attribute__((vector_size(PTC_REDUCE_VEC_BYTES)));
typedef uint32_t U32xN __attribute__((vector_size(PTC_REDUCE_VEC_BYTES)));
typedef int32_t I32xN __attribute__((vector_size(PTC_REDUCE_VEC_BYTES)));

template <class To, class From>
inline To bit_cast(From from) {
  return __builtin_bit_cast(To, from);  // GCC >= 11, Clang >= 9
}

// mask ? x : y. For vectors (mask: an integer vector of -1/0 lanes, as
// comparisons give) it is and/andnot/or, which every SIMD ISA has; GCC
// lowers a vector ?: less reliably.
template <class M, class V>
inline V select(M mask, V x, V y) {
  if constexpr (std::is_arithmetic<V>::value) {
    return mask ? x : y;
  } else {
    return bit_cast<V>((bit_cast<M>(x) & mask) | (bit_cast<M>(y) & ~mask));
  }
}

// 16-bit float formats, kLanes at a time (a 16-bit value in the low half of
// each uint32 lane): exact widening to float32, one round-to-nearest-even
// narrowing. Selects, not branches, so that the code stays vectorised.

// IEEE binary16. from_float matches F16C's vcvtps2ph with RNE bit for bit
// (checked over all 2^32 inputs, also under FTZ/DAZ); reduce_avx2.cc uses
// that instruction instead. NaN keeps its sign and top 10 payload bits and
// is made quiet; overflow gives Inf. The subnormal case relies on a float
// addition rounding to nearest even, MXCSR's default.
struct Half {
  static F32xN to_float(U32xN h) {
    const U32xN sign = (h & 0x8000u) << 16;
    const U32xN em = (h & 0x7fffu) << 13;  // exponent and mantissa, float-aligned
    const U32xN exp = em & 0x0f800000u;
    // Subnormal: 1.m * 2^-14 minus the implicit 2^-14, exact.
    const U32xN sub = bit_cast<U32xN>(bit_cast<F32xN>(em + (113u << 23)) - 0x1p-14f);
    const U32xN out = select(exp == 0x0f800000u, em + (224u << 23),      // Inf/NaN: 31 -> 255
                             select(exp == 0, sub, em + (112u << 23)));  // rebias 15 -> 127
    return bit_cast<F32xN>(out | sign);
  }

  static U32xN from_float(F32xN f) {
    const U32xN all = bit_cast<U32xN>(f);
    const U32xN u = all & 0x7fffffffu;
    // Non-negative, so signed compares are exact (and cheaper on SSE2).
    const I32xN s = bit_cast<I32xN>(u);
    const U32xN nan = 0x7e00u | ((u >> 13) & 0x3ffu);
    // |f| < 2^-14: adding 0.5f leaves the result's 2^-24 units in the low bits.
    const U32xN sub = bit_cast<U32xN>(bit_cast<F32xN>(u) + 0.5f) - 0x3f000000u;
    // Normal: rebias, round to nearest even on the 13 dropped bits; a carry
    // out of the mantissa bumps the exponent, up to Inf when due.
    const U32xN normal = (u - (112u << 23) + 0xfffu + ((u >> 13) & 1u)) >> 13;
    const U32xN out = select(s > 0x7f800000, nan,
                             select(s >= (143 << 23), U32xN{} + 0x7c00u,  // >= 65536 or Inf
                                    select(s < (113 << 23), sub, normal)));
    return out | ((all >> 16) & 0x8000u);
  }
};

// bfloat16: the top half of a float32, so integer ops suffice. NaN stays NaN
// (made quiet, sign and top payload bits kept); the rest rounds to nearest
// even, overflowing to Inf.
struct BFloat16 {
  static F32xN to_float(U32xN h) { return bit_cast<F32xN>(h << 16); }
  static U32xN from_float(F32xN f) {
    const U32xN u = bit_cast<U32xN>(f);
    const I32xN abs = bit_cast<I32xN>(u & 0x7fffffffu);
    return select(abs > 0x7f800000, (u >> 16) | 0x40u, (u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
};

// Operators. Integers wrap: the arithmetic is done in the unsigned type,
// where overflow is defined (uint8 promotes to int, where a product of two
// bytes fits).

template <class V>
constexpr bool kIsInt = std::is_integral<V>::value;

template <class V>
using Arith = typename std::conditional_t<kIsInt<V>, std::make_unsigned<V>, std::decay<V>>::type;

// With two NaN operands x86 returns the first one's payload, and compilers
// may swap the operands of + and *. Using a's NaN for both makes the result
// independent of the order (b's NaN when only b is one). A compare and a
// blend for floats; folded away for integers.
template <class V>
V nan_first(V a, V b) {
  return select(a != a, a, b);
}

struct SumOp {
  template <class V>
  V operator()(V a, V b) const {
    return static_cast<V>(static_cast<Arith<V>>(a) + static_cast<Arith<V>>(nan_first(a, b)));
  }
};

struct ProdOp {
  template <class V>
  V operator()(V a, V b) const {
    return static_cast<V>(static_cast<Arith<V>>(a) * static_cast<Arith<V>>(nan_first(a, b)));
  }
};

// numpy.minimum/maximum: a NaN in either input gives NaN (a's if a is one).
// A select, not std::min, so that no compiler may turn it into minps/maxps,
// whose NaN rules differ. (a != a) is false for integers.
template <bool kMax>
struct MinMaxOp {
  template <class V>
  V operator()(V a, V b) const {
    return select((kMax ? b < a : a < b) | (a != a), a, b);
  }
};
using MinOp = MinMaxOp<false>;
using MaxOp = MinMaxOp<true>;

// bool (one byte): results are always 0 or 1, whatever non-zero byte came in.
struct OrOp {
  uint8_t operator()(uint8_t a, uint8_t b) const { return (a | b) != 0; }
};
struct AndOp {
  uint8_t operator()(uint8_t a, uint8_t b) const { return (a != 0) & (b != 0); }
};

// The type the divisor is used as for element type T. Floats divide (a
// reciprocal multiply would round differently); 16-bit floats in float32.
// Integers up to 32 bits divide in double, which vectorises where integer
// division cannot, and is exact: with |x| < 2^31 and an integer d, x/d is an
// integer (exact in double) or at least 1/d away from one, while the rounding
// error is below 2^-22/d, so truncating gives C++'s quotient. int64 divides
// as int64 (d >= 1, so INT64_MIN / d is defined).
template <class T>
using DivisorType =
    std::conditional_t<kIsInt<T>, std::conditional_t<sizeof(T) == 8, int64_t, double>,
                       std::conditional_t<std::is_same<T, double>::value, double, float>>;

// (a + b) / d, or a / d (divide() runs as a binary op on (src, src), the
// second operand then being dead code). One rounding for 16-bit floats.
template <class S, bool kSumFirst>
struct DivideOp {
  S d;
  template <class V>
  V operator()(V a, V b) const {
    V x = a;
    if constexpr (kSumFirst) x = SumOp()(a, b);
    if constexpr (kIsInt<V> && !kIsInt<S>) {
      return static_cast<V>(static_cast<int32_t>(x / d));  // truncates toward zero
    } else {
      return static_cast<V>(x / d);
    }
  }
};

// kVecs float vectors: what a Vec<Fmt> loads from (stores to) kVecs *
// kLanes 16-bit floats.
template <int kVecs>
struct Block {
  F32xN v[kVecs];
};

// Load/store with plain integer ops, for any width: a vector's worth of
// 32-bit words holds 2 * kLanes values; the low halves (even elements on
// little endian) go to v[0], the high halves to v[1], and store puts them
// back where they came from. No shuffles, so it is cheap everywhere.
template <class Fmt>
struct PortableVec {
  static constexpr int kVecs = 2;
  static Block<2> load(const uint16_t* p) {
    U32xN w;
    std::memcpy(&w, p, sizeof(w));
    return {{Fmt::to_float(w & 0xffffu), Fmt::to_float(w >> 16)}};
  }
  static void store(uint16_t* p, const Block<2>& x) {
    // from_float leaves the upper 16 bits zero.
    const U32xN w = Fmt::from_float(x.v[0]) | (Fmt::from_float(x.v[1]) << 16);
    std::memcpy(p, &w, sizeof(w));
  }
};

// Calls fn(T()) for the C++ type of dtype (Half/BFloat16 for the 16-bit
// floats). Not for bool.
template <class Fn>
void with_type(DType dtype, Fn&& fn) {
  if (dtype == DType::kFloat16) return fn(Half());
  if (dtype == DType::kBFloat16) return fn(BFloat16());
  if (dtype == DType::kFloat32) return fn(float());
  if (dtype == DType::kFloat64) return fn(double());
  if (dtype == DType::kInt8) return fn(int8_t());
  if (dtype == DType::kUInt8) return fn(uint8_t());
  if (dtype == DType::kInt32) return fn(int32_t());
  if (dtype == DType::kInt64) return fn(int64_t());
  // bool is handled by the callers, invalid values by reduce.cc
}

// Non-temporal stores: written straight to memory, not read into the cache first. SSE2
// is part of x86-64, so both kernel sets have them; elsewhere a plain copy.
inline bool stream_aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// dst (16-byte aligned) = src, `bytes` of it.
inline void stream_copy(void* dst, const void* src, size_t bytes) {
#if defined(__x86_64__)
  auto* d = static_cast<__m128i*>(dst);
  const auto* s = static_cast<const __m128i*>(src);
  size_t i = 0;
  for (; (i + 1) * 16 <= bytes; ++i) _mm_stream_si128(d + i, _mm_loadu_si128(s + i));
  std::memcpy(reinterpret_cast<char*>(d + i), reinterpret_cast<const char*>(s + i), bytes - i * 16);
#else
  std::memcpy(dst, src, bytes);
#endif
}

// Orders the non-temporal stores before whatever this thread writes next (the
// completion another thread waits on): x86 does not order them otherwise.
inline void stream_fence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

// One kernel set: the entry points of reduce_internal::Kernels. Vec<Fmt>
// converts the 16-bit floats (PortableVec, or reduce_avx2.cc's).
template <template <class> class Vec>
struct KernelSet {
  // dst[i] = f(a[i], b[i]). dst may equal a or b: each index (block, for the
  // 16-bit floats) is read before it is written, and without __restrict GCC
  // versions the loop with an overlap check that still takes the vector path
  // when dst == a (distance 0).
  template <class T, class F>
  static void run(void* dst, const void* a, const void* b, size_t n, F f) {
    if constexpr (std::is_same<T, Half>::value || std::is_same<T, BFloat16>::value) {
      run16<Vec<T>>(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(a),
                    static_cast<const uint16_t*>(b), n, f);
    } else {
      T* d = static_cast<T*>(dst);
      const T* x = static_cast<const T*>(a);
      const T* y = static_cast<const T*>(b);
      for (size_t i = 0; i < n; ++i) d[i] = f(x[i], y[i]);
    }
  }

  // Through float32, a Block at a time; the tail goes through the same code,
  // zero-padded, so that every element is converted the same way.
  template <class V, class F>
  static void run16(uint16_t* d, const uint16_t* a, const uint16_t* b, size_t n, F f) {
    constexpr size_t kBlock = V::kVecs * kLanes;
    auto step = [f](uint16_t* dp, const uint16_t* ap, const uint16_t* bp) {
      Block<V::kVecs> x = V::load(ap);
      const Block<V::kVecs> y = V::load(bp);
      for (int k = 0; k < V::kVecs; ++k) x.v[k] = f(x.v[k], y.v[k]);
      V::store(dp, x);
    };
    size_t i = 0;
    for (; i + kBlock <= n; i += kBlock) step(d + i, a + i, b + i);
    if (i == n) return;
    uint16_t ta[kBlock] = {}, tb[kBlock] = {}, td[kBlock];
    std::memcpy(ta, a + i, (n - i) * 2);
    std::memcpy(tb, b + i, (n - i) * 2);
    step(td, ta, tb);
    std::memcpy(d + i, td, (n - i) * 2);
  }

  static void reduce(void* dst, const void* a, const void* b, size_t n, DType dtype, ReduceOp op) {
    if (dtype == DType::kBool) {
      if (op == ReduceOp::kProd || op == ReduceOp::kMin) return run<uint8_t>(dst, a, b, n, AndOp());
      return run<uint8_t>(dst, a, b, n, OrOp());
    }
    with_type(dtype, [&](auto t) {
      using T = decltype(t);
      if (op == ReduceOp::kSum || op == ReduceOp::kMean) return run<T>(dst, a, b, n, SumOp());
      if (op == ReduceOp::kMin) return run<T>(dst, a, b, n, MinOp());
      if (op == ReduceOp::kMax) return run<T>(dst, a, b, n, MaxOp());
      if (op == ReduceOp::kProd) return run<T>(dst, a, b, n, ProdOp());
    });
  }

  static void reduce_divide(void* dst, const void* a, const void* b, size_t n, DType dtype,
                            int64_t divisor) {
    with_type(dtype, [&](auto t) {
      using S = DivisorType<decltype(t)>;
      run<decltype(t)>(dst, a, b, n, DivideOp<S, true>{static_cast<S>(divisor)});
    });
  }

  // d[i] = g(f(...f(a[i], s[0][i])..., s[K-2][i]), s[K-1][i]) for K = 1..3 inputs besides
  // a: one pass that reads a and the K inputs side by side and writes d once. d may
  // equal a (each index is read before it is written); the s[k] must not overlap d.
  template <class T, size_t K, class F, class G>
  static void fold(T* d, const T* a, const void* const* s, F f, G g, size_t n) {
    const T* p0 = static_cast<const T*>(s[0]);
    const T* p1 = static_cast<const T*>(s[K > 1 ? 1 : 0]);
    const T* p2 = static_cast<const T*>(s[K > 2 ? 2 : 0]);
    for (size_t i = 0; i < n; ++i) {
      if constexpr (K == 1) {
        d[i] = g(a[i], p0[i]);
      } else if constexpr (K == 2) {
        d[i] = g(f(a[i], p0[i]), p1[i]);
      } else {
        d[i] = g(f(f(a[i], p0[i]), p1[i]), p2[i]);
      }
    }
  }

  // The last group of fold_sum: K sources combined into acc with g last.
  template <class T, class G>
  static void fold_last(T* d, const T* acc, const void* const* s, size_t k, G g, size_t n) {
    if (k == 1) fold<T, 1>(d, acc, s, SumOp(), g, n);
    if (k == 2) fold<T, 2>(d, acc, s, SumOp(), g, n);
    if (k == 3) fold<T, 3>(d, acc, s, SumOp(), g, n);
  }

  // The sum of m >= 2 inputs of T, left to right, three at a time after the first, the
  // last step being g (a plain sum, or the sum-and-divide of a mean). With `stream` (and
  // at most four sources, so that every source is read in one pass) the result is made a
  // small block at a time in a cache-resident buffer and written with non-temporal stores,
  // which skip reading dst's lines into the cache first.
  template <class T, class G>
  static void fold_sum(void* dst, const void* const* srcs, size_t m, size_t n, G g, bool stream) {
    T* d = static_cast<T*>(dst);
    const T* acc = static_cast<const T*>(srcs[0]);
    if (stream && m <= 4 && stream_aligned(dst)) {
      constexpr size_t kBlock = 2048 / sizeof(T);
      alignas(64) T tmp[kBlock];
      const void* s[3];
      for (size_t i = 0; i < n; i += kBlock) {
        const size_t len = n - i < kBlock ? n - i : kBlock;
        for (size_t r = 1; r < m; ++r) s[r - 1] = static_cast<const T*>(srcs[r]) + i;
        fold_last<T>(tmp, acc + i, s, m - 1, g, len);
        stream_copy(d + i, tmp, len * sizeof(T));
      }
      stream_fence();
      return;
    }
    for (size_t r = 1; r < m;) {
      // No std::min here: a shared template instance (reduce_avx2.cc explains why).
      const size_t k = m - r < 3 ? m - r : 3;
      const void* const* s = srcs + r;
      r += k;
      if (r == m) {
        fold_last<T>(d, acc, s, k, g, n);
      } else {
        fold<T, 3>(d, acc, s, SumOp(), SumOp(), n);
      }
      acc = d;
    }
  }

  // dst = srcs[0] op srcs[1] op ... op srcs[m-1] (m >= 2), left to right, the last step
  // dividing by `divisor` when it is > 0 (sum and mean only). The same bits as the pairwise
  // chain reduce(dst, srcs[0], srcs[1]); reduce(dst, dst, srcs[2]); ...; reduce_divide(...)
  // because every element goes through the same operations in the same order; a sum of
  // 32/64-bit floats or integers is fused (dst written once, the inputs streamed side by
  // side); 16-bit floats (rounded at every step), bool and min/max/prod run as that chain.
  static void reduce_many(void* dst, const void* const* srcs, size_t m, size_t n, DType dtype,
                          ReduceOp op, int64_t divisor, bool stream) {
    const bool sum = op == ReduceOp::kSum || op == ReduceOp::kMean;
    const bool fused =
        sum && dtype != DType::kBool && dtype != DType::kFloat16 && dtype != DType::kBFloat16;
    if (!fused) {
      const void* acc = srcs[0];
      for (size_t r = 1; r < m; ++r) {
        if (divisor > 0 && r + 1 == m) {
          reduce_divide(dst, acc, srcs[r], n, dtype, divisor);
        } else {
          reduce(dst, acc, srcs[r], n, dtype, op);
        }
        acc = dst;
      }
      return;
    }
    with_type(dtype, [&](auto t) {
      using T = decltype(t);
      if constexpr (!std::is_same<T, Half>::value && !std::is_same<T, BFloat16>::value) {
        using S = DivisorType<T>;
        if (divisor > 0) {
          fold_sum<T>(dst, srcs, m, n, DivideOp<S, true>{static_cast<S>(divisor)}, stream);
        } else {
          fold_sum<T>(dst, srcs, m, n, SumOp(), stream);
        }
      }
    });
  }

  static void divide(void* dst, const void* src, size_t n, DType dtype, int64_t divisor) {
    with_type(dtype, [&](auto t) {
      using S = DivisorType<decltype(t)>;
      run<decltype(t)>(dst, src, src, n, DivideOp<S, false>{static_cast<S>(divisor)});
    });
  }
};

}  // namespace PTC_REDUCE_NS
}  // namespace pytfcomm
