#include "nccl/reduce.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

namespace ptcsi_nccl {
namespace {

template <class T>
T wrap_add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}

template <class T>
T wrap_mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    // 8-bit operands promote to int; their product fits, and the cast wraps.
    using W = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, U>;
    return static_cast<T>(static_cast<U>(static_cast<W>(static_cast<U>(a)) * static_cast<U>(b)));
  } else {
    return a * b;
  }
}

template <class T>
T combine(ncclRedOp_t op, T a, T b) {
  switch (op) {
    case ncclProd:
      return wrap_mul(a, b);
    case ncclMax:
      return b > a ? b : a;
    case ncclMin:
      return b < a ? b : a;
    default:  // sum, avg
      return wrap_add(a, b);
  }
}

template <class T>
void reduce_native(ncclRedOp_t op, T* out, const void* const* in, int n, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    T acc = static_cast<const T*>(in[0])[i];
    for (int k = 1; k < n; ++k) acc = combine(op, acc, static_cast<const T*>(in[k])[i]);
    if (op == ncclAvg) {
      if constexpr (std::is_integral_v<T>) {
        acc = static_cast<T>(acc / static_cast<T>(n));
      } else {
        acc = acc / static_cast<T>(n);
      }
    }
    out[i] = acc;
  }
}

template <float (*Load)(uint16_t), uint16_t (*Store)(float)>
void reduce_16(ncclRedOp_t op, uint16_t* out, const void* const* in, int n, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    uint16_t acc = static_cast<const uint16_t*>(in[0])[i];
    for (int k = 1; k < n; ++k) {
      acc = Store(combine(op, Load(acc), Load(static_cast<const uint16_t*>(in[k])[i])));
    }
    if (op == ncclAvg) acc = Store(Load(acc) / static_cast<float>(n));
    out[i] = acc;
  }
}

}  // namespace

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000 | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {
    // Subnormal: normalise.
    int e = 113;
    while ((mant & 0x400) == 0) {
      mant <<= 1;
      --e;
    }
    bits = sign | (static_cast<uint32_t>(e) << 23) | ((mant & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t a = x & 0x7fffffff;
  if (a >= 0x7f800000) {  // inf, nan (kept quiet and non-zero)
    return static_cast<uint16_t>(sign | 0x7c00 |
                                 (a > 0x7f800000 ? 0x200 | ((a >> 13) & 0x3ff) : 0));
  }
  if (a >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);  // rounds past 65504
  if (a < 0x38800000) {                                              // below 2^-14: subnormal
    if (a <= 0x33000000) return sign;  // at most 2^-25: ties to even zero
    const uint32_t e = a >> 23;
    const uint32_t m = (a & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - e;
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t r = (((a >> 23) - 112) << 10) | ((a >> 13) & 0x3ff);
  const uint32_t rem = a & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) ++r;
  return static_cast<uint16_t>(sign | r);
}

float bf16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

const char* type_name(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
      return "int8";
    case ncclUint8:
      return "uint8";
    case ncclInt32:
      return "int32";
    case ncclUint32:
      return "uint32";
    case ncclInt64:
      return "int64";
    case ncclUint64:
      return "uint64";
    case ncclFloat16:
      return "float16";
    case ncclBfloat16:
      return "bfloat16";
    case ncclFloat32:
      return "float32";
    case ncclFloat64:
      return "float64";
    default:
      return "unsupported-type";
  }
}

const char* op_name(ncclRedOp_t op) {
  switch (op) {
    case ncclSum:
      return "sum";
    case ncclProd:
      return "prod";
    case ncclMax:
      return "max";
    case ncclMin:
      return "min";
    case ncclAvg:
      return "avg";
    default:
      return "unsupported-op";
  }
}

bool op_supported(ncclRedOp_t op) {
  return op == ncclSum || op == ncclProd || op == ncclMax || op == ncclMin || op == ncclAvg;
}

void reduce(ncclDataType_t t, ncclRedOp_t op, void* out, const void* const* in, int n,
            size_t count) {
  switch (t) {
    case ncclInt8:
      return reduce_native(op, static_cast<int8_t*>(out), in, n, count);
    case ncclUint8:
      return reduce_native(op, static_cast<uint8_t*>(out), in, n, count);
    case ncclInt32:
      return reduce_native(op, static_cast<int32_t*>(out), in, n, count);
    case ncclUint32:
      return reduce_native(op, static_cast<uint32_t*>(out), in, n, count);
    case ncclInt64:
      return reduce_native(op, static_cast<int64_t*>(out), in, n, count);
    case ncclUint64:
      return reduce_native(op, static_cast<uint64_t*>(out), in, n, count);
    case ncclFloat32:
      return reduce_native(op, static_cast<float*>(out), in, n, count);
    case ncclFloat64:
      return reduce_native(op, static_cast<double*>(out), in, n, count);
    case ncclFloat16:
      return reduce_16<half_to_float, float_to_half>(op, static_cast<uint16_t*>(out), in, n, count);
    case ncclBfloat16:
      return reduce_16<bf16_to_float, float_to_bf16>(op, static_cast<uint16_t*>(out), in, n, count);
    default:
      return;
  }
}

}  // namespace ptcsi_nccl
