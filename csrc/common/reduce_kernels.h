// The element-wise math behind reduce.h, written once and compiled twice:
// by reduce_generic.cc with baseline flags and by reduce_avx2.cc with AVX2.
// Both must give bitwise-identical results, because ranks of one job may run
// on different CPUs and an all-reduce must leave the same bytes everywhere.
//
// Textual include, only for those two files. Each defines PTC_REDUCE_NS
// first so that its template instantiations get distinct symbol names:
// with a shared name the linker would keep one copy of each, and the AVX2
// copy could end up running on a CPU without AVX2.
//
// The operators below are templates over the value type V so that the same
// expression serves a scalar (float, int8_t, ...) and a GCC vector type
// (__m256 in reduce_avx2.cc): the per-op math lives only here.
#pragma once

#ifndef PTC_REDUCE_NS
#error "define PTC_REDUCE_NS before including common/reduce_kernels.h"
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "common/dtype.h"

namespace pytfcomm {
namespace PTC_REDUCE_NS {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// c ? x : y with masks. A plain ?: lets GCC sink the float math of the unused
// arm into a branch, which it then will not vectorise (the math may trap).
inline uint32_t select_bits(bool c, uint32_t x, uint32_t y) {
  const uint32_t m = 0u - static_cast<uint32_t>(c);
  return (x & m) | (y & ~m);
}

// ---------------------------------------------------------------------------
// 16-bit float formats: exact widening to float32, one round-to-nearest-even
// narrowing. Branch-free so that GCC vectorises the generic loops.

// IEEE binary16. from_float matches F16C's vcvtps2ph with RNE bit for bit
// (checked over all 2^32 inputs), which reduce_avx2.cc uses instead: NaN
// keeps its sign and top 10 payload bits and is made quiet; overflow gives
// Inf. The subnormal case leans on a float addition rounding to nearest even,
// i.e. the default MXCSR rounding mode; the result is exact, so FTZ/DAZ do
// not matter.
struct Half {
  static float to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t em = static_cast<uint32_t>(h & 0x7fffu) << 13;  // exponent+mantissa
    const uint32_t exp = em & 0x0f800000u;
    const uint32_t normal = em + (112u << 23);  // rebias 15 -> 127
    const uint32_t inf_nan = em + (224u << 23);  // exponent 31 -> 255
    // Subnormal: 1.m * 2^-14 minus the implicit 2^-14 is exact.
    const uint32_t sub = float_bits(bits_float(em + (113u << 23)) - bits_float(113u << 23));
    const uint32_t out = select_bits(exp == 0x0f800000u, inf_nan, select_bits(exp == 0, sub, normal));
    return bits_float(out | sign);
  }

  static uint16_t from_float(float f) {
    const uint32_t all = float_bits(f);
    const uint32_t sign = (all >> 16) & 0x8000u;
    const uint32_t u = all & 0x7fffffffu;
    const uint32_t nan = 0x7e00u | ((u >> 13) & 0x3ffu);
    // |f| < 2^-14: adding 0.5f puts the result's 2^-24 units in the low bits.
    const uint32_t sub = float_bits(bits_float(u) + 0.5f) - float_bits(0.5f);
    // Normal: rebias, then round to nearest even on the 13 dropped bits; a
    // carry out of the mantissa bumps the exponent, up to Inf when due.
    const uint32_t normal = (u - (112u << 23) + 0xfffu + ((u >> 13) & 1u)) >> 13;
    const uint32_t out = select_bits(u > 0x7f800000u, nan,
                                     select_bits(u >= 143u << 23, 0x7c00u,  // >= 65536 or Inf
                                                 select_bits(u < 113u << 23, sub, normal)));
    return static_cast<uint16_t>(out | sign);
  }
};

// bfloat16: the top half of a float32, so integer ops suffice and both paths
// use the same ones. round_bits takes uint32_t or a GCC uint32 vector.
struct BFloat16 {
  static float to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

  // Returns the bf16 bits in the low 16 bits of each lane. NaN is kept (made
  // quiet; its sign and top payload bits survive); everything else rounds to
  // nearest even, overflowing to Inf.
  template <class U>
  static U round_bits(U u) {
    return (u & 0x7fffffffu) > 0x7f800000u ? ((u >> 16) | 0x40u)
                                           : ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }

  static uint16_t from_float(float f) { return static_cast<uint16_t>(round_bits(float_bits(f))); }
};

// ---------------------------------------------------------------------------
// Operators. Integers wrap: the arithmetic is done in the unsigned type,
// where overflow is defined.

template <class V>
constexpr bool kIsInt = std::is_integral<V>::value;

struct SumOp {
  template <class V>
  V operator()(V a, V b) const {
    if constexpr (kIsInt<V>) {
      using U = std::make_unsigned_t<V>;
      return static_cast<V>(static_cast<U>(a) + static_cast<U>(b));
    } else {
      return a + b;
    }
  }
};

struct ProdOp {
  template <class V>
  V operator()(V a, V b) const {
    if constexpr (kIsInt<V>) {
      // uint8 operands promote to int, whose product of two bytes fits.
      using U = std::make_unsigned_t<V>;
      return static_cast<V>(static_cast<U>(a) * static_cast<U>(b));
    } else {
      return a * b;
    }
  }
};

// numpy.minimum/maximum: a NaN in either input gives NaN (a's if a is one).
// Written as a select, not std::min, so no compiler may turn it into
// minps/maxps, whose NaN rules differ. (a != a) is false for integers.
struct MinOp {
  template <class V>
  V operator()(V a, V b) const {
    return ((a < b) | (a != a)) ? a : b;
  }
};

struct MaxOp {
  template <class V>
  V operator()(V a, V b) const {
    return ((a > b) | (a != a)) ? a : b;
  }
};

// bool (one byte): results are always 0 or 1, whatever non-zero byte came in.
struct OrOp {
  uint8_t operator()(uint8_t a, uint8_t b) const { return (a | b) != 0; }
};

struct AndOp {
  uint8_t operator()(uint8_t a, uint8_t b) const { return (a != 0) & (b != 0); }
};

// x / divisor. Floats divide (no reciprocal multiply, which would round
// differently) by the divisor converted to the computing type.
template <class S>
struct FloatDivide {
  S divisor;
  template <class V>
  V operator()(V x) const {
    return x / divisor;
  }
};

// Truncating integer division. Types up to 32 bits go through double, which
// vectorises where integer division cannot and is exact: |x| < 2^31 and an
// integer divisor d make x/d either an integer (exact in double) or at least
// 1/d away from one, while the rounding error is below 2^-22/d, so the
// truncation is the same as C++'s. int64 divides as int64 (divisor >= 1, so
// INT64_MIN / divisor cannot overflow).
struct IntDivide {
  int64_t divisor;
  double divisor_d;
  template <class T>
  T operator()(T x) const {
    if constexpr (sizeof(T) <= 4) {
      return static_cast<T>(static_cast<int32_t>(static_cast<double>(x) / divisor_d));
    } else {
      return static_cast<T>(x / divisor);
    }
  }
};

// (a + b) / divisor, one rounding for 16-bit floats (composed in float32).
template <class Div>
struct SumDivide {
  Div div;
  template <class V>
  V operator()(V a, V b) const {
    return div(SumOp()(a, b));
  }
};

// ---------------------------------------------------------------------------
// Loops. dst may equal a or b: each index is read before it is written, and
// without __restrict GCC versions the loop with a runtime overlap check that
// still takes the vector path when dst == a (distance 0).

template <class T, class F>
void binary_loop(void* dst, const void* a, const void* b, size_t n, F f) {
  T* d = static_cast<T*>(dst);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) d[i] = f(x[i], y[i]);
}

template <class T, class F>
void unary_loop(void* dst, const void* src, size_t n, F f) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  for (size_t i = 0; i < n; ++i) d[i] = f(s[i]);
}

// 16-bit floats through float32, one element at a time (GCC vectorises it
// with SSE2). reduce_avx2.cc has a drop-in replacement using F16C/AVX2.
struct ScalarLoops16 {
  template <class Fmt, class F>
  static void binary(uint16_t* d, const uint16_t* a, const uint16_t* b, size_t n, F f) {
    for (size_t i = 0; i < n; ++i) {
      d[i] = Fmt::from_float(f(Fmt::to_float(a[i]), Fmt::to_float(b[i])));
    }
  }
  template <class Fmt, class F>
  static void unary(uint16_t* d, const uint16_t* s, size_t n, F f) {
    for (size_t i = 0; i < n; ++i) d[i] = Fmt::from_float(f(Fmt::to_float(s[i])));
  }
};

// Calls fn with the functor for op on a numeric (non-bool) type.
template <class Fn>
void with_op(ReduceOp op, Fn&& fn) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean:
      return fn(SumOp());
    case ReduceOp::kMin:
      return fn(MinOp());
    case ReduceOp::kMax:
      return fn(MaxOp());
    case ReduceOp::kProd:
      return fn(ProdOp());
    default:
      return;  // validated by the caller (reduce.cc)
  }
}

// Calls fn(type_tag, divide_functor) for dtype; float16/bfloat16 get the
// format as the tag and a float32 functor. Not for bool.
template <class Fn>
void with_divide(DType dtype, int64_t divisor, Fn&& fn) {
  const IntDivide int_div{divisor, static_cast<double>(divisor)};
  const FloatDivide<float> f32_div{static_cast<float>(divisor)};
  switch (dtype) {
    case DType::kFloat16: return fn(Half(), f32_div);
    case DType::kBFloat16: return fn(BFloat16(), f32_div);
    case DType::kFloat32: return fn(float(), f32_div);
    case DType::kFloat64: return fn(double(), FloatDivide<double>{static_cast<double>(divisor)});
    case DType::kInt8: return fn(int8_t(), int_div);
    case DType::kUInt8: return fn(uint8_t(), int_div);
    case DType::kInt32: return fn(int32_t(), int_div);
    case DType::kInt64: return fn(int64_t(), int_div);
    default: return;  // bool and invalid values are rejected by reduce.cc
  }
}

template <class Tag>
constexpr bool kIs16 = std::is_same<Tag, Half>::value || std::is_same<Tag, BFloat16>::value;

// The three entry points of one kernel set; Loops16 handles the 16-bit
// float formats (ScalarLoops16 or the AVX2 version).
template <class Loops16>
struct Dispatch {
  static void reduce(void* dst, const void* a, const void* b, size_t n, DType dtype,
                     ReduceOp op) {
    auto run16 = [&](auto fmt) {
      with_op(op, [&](auto f) {
        Loops16::template binary<decltype(fmt)>(static_cast<uint16_t*>(dst),
                                                static_cast<const uint16_t*>(a),
                                                static_cast<const uint16_t*>(b), n, f);
      });
    };
    auto run = [&](auto tag) {
      with_op(op, [&](auto f) { binary_loop<decltype(tag)>(dst, a, b, n, f); });
    };
    switch (dtype) {
      case DType::kFloat16: return run16(Half());
      case DType::kBFloat16: return run16(BFloat16());
      case DType::kFloat32: return run(float());
      case DType::kFloat64: return run(double());
      case DType::kInt8: return run(int8_t());
      case DType::kUInt8: return run(uint8_t());
      case DType::kInt32: return run(int32_t());
      case DType::kInt64: return run(int64_t());
      case DType::kBool:
        if (op == ReduceOp::kProd || op == ReduceOp::kMin) {
          return binary_loop<uint8_t>(dst, a, b, n, AndOp());
        }
        return binary_loop<uint8_t>(dst, a, b, n, OrOp());
      default: return;
    }
  }

  static void reduce_divide(void* dst, const void* a, const void* b, size_t n, DType dtype,
                            int64_t divisor) {
    with_divide(dtype, divisor, [&](auto tag, auto div) {
      using Tag = decltype(tag);
      const SumDivide<decltype(div)> f{div};
      if constexpr (kIs16<Tag>) {
        Loops16::template binary<Tag>(static_cast<uint16_t*>(dst),
                                      static_cast<const uint16_t*>(a),
                                      static_cast<const uint16_t*>(b), n, f);
      } else {
        binary_loop<Tag>(dst, a, b, n, f);
      }
    });
  }

  static void divide(void* dst, const void* src, size_t n, DType dtype, int64_t divisor) {
    with_divide(dtype, divisor, [&](auto tag, auto div) {
      using Tag = decltype(tag);
      if constexpr (kIs16<Tag>) {
        Loops16::template unary<Tag>(static_cast<uint16_t*>(dst),
                                     static_cast<const uint16_t*>(src), n, div);
      } else {
        unary_loop<Tag>(dst, src, n, div);
      }
    });
  }
};

}  // namespace PTC_REDUCE_NS
}  // namespace pytfcomm
