// Reduction kernels against plain scalar references, and the AVX2 kernel set
// against the generic one bit for bit (ranks on different CPUs must agree),
// for every dtype, op, size and aliasing of dst with the inputs.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "common/error.h"
#include "common/reduce.h"
#include "common/reduce_internal.h"

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

namespace pytfcomm {
namespace {

using reduce_internal::Kernels;
using Bytes = std::vector<uint8_t>;

enum class Kind { kReduce, kReduceDivide, kDivide };

std::vector<const Kernels*> kernel_sets() {
  std::vector<const Kernels*> sets{&reduce_internal::kGenericKernels};
#if defined(__x86_64__)
  if (reduce_internal::cpu_has_avx2()) sets.push_back(&reduce_internal::kAvx2Kernels);
#endif
  return sets;
}

void run(const Kernels& k, Kind kind, void* d, const void* a, const void* b, size_t n, DType t,
         ReduceOp op, int64_t divisor) {
  if (kind == Kind::kReduce) k.reduce(d, a, b, n, t, op);
  if (kind == Kind::kReduceDivide) k.reduce_divide(d, a, b, n, t, divisor);
  if (kind == Kind::kDivide) k.divide(d, a, n, t, divisor);
}

// Plain references, deliberately unlike the kernels' bit tricks. Value of a 16-bit float with m
// mantissa bits (float16: 10, bfloat16: 7).
double decode16(uint16_t h, int m) {
  const int e_max = (1 << (15 - m)) - 1, bias = e_max / 2;
  const int e = (h >> m) & e_max, frac = h & ((1 << m) - 1);
  const double v = e == 0       ? std::ldexp(frac, 1 - bias - m)
                   : e == e_max ? (frac ? NAN : INFINITY)
                                : std::ldexp((1 << m) + frac, e - bias - m);
  return (h & 0x8000) ? -v : v;
}

// x rounded to nearest even with p significant bits, minimum exponent emin
// (subnormals below), beyond max_finite -> Inf.
double round_to(double x, int p, int emin, double max_finite) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  const int e = std::max(std::ilogb(x), emin);
  const double r = std::ldexp(std::nearbyint(std::ldexp(x, p - 1 - e)), e - (p - 1));
  return std::fabs(r) > max_finite ? std::copysign(INFINITY, x) : r;
}

// Plain scalar semantics; T is the computing type.
template <class T>
T ref(Kind kind, ReduceOp op, T a, T b, int64_t divisor) {
  if constexpr (std::is_integral<T>::value) {
    const T sum = static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
    if (kind == Kind::kDivide) return static_cast<T>(static_cast<int64_t>(a) / divisor);
    if (kind == Kind::kReduceDivide) return static_cast<T>(static_cast<int64_t>(sum) / divisor);
    if (op == ReduceOp::kProd) return static_cast<T>(uint64_t(a) * uint64_t(b));
    if (op == ReduceOp::kSum || op == ReduceOp::kMean) return sum;
  } else {
    if (kind == Kind::kDivide) return a / static_cast<T>(divisor);
    if (kind == Kind::kReduceDivide) return (a + b) / static_cast<T>(divisor);
    if (op == ReduceOp::kProd) return a * b;
    if (op == ReduceOp::kSum || op == ReduceOp::kMean) return a + b;
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) ? a : b;
  }
  return op == ReduceOp::kMin ? (a < b ? a : b) : (a > b ? a : b);
}

bool same(double want, double got) {
  return std::isnan(want) ? std::isnan(got)
                          : want == got && std::signbit(want) == std::signbit(got);
}

template <class T>
T ld(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Whether got is the reference result for inputs a and b (one element).
bool check_elem(DType t, Kind k, ReduceOp op, int64_t dv, const uint8_t* a, const uint8_t* b,
                const uint8_t* got) {
  auto num = [&](auto tag) {
    using T = decltype(tag);
    const T want = ref(k, op, ld<T>(a), ld<T>(b), dv);
    return std::is_integral<T>::value ? want == ld<T>(got) : same(want, ld<T>(got));
  };
  if (t == DType::kFloat32) return num(float());
  if (t == DType::kFloat64) return num(double());
  if (t == DType::kInt8) return num(int8_t());
  if (t == DType::kUInt8) return num(uint8_t());
  if (t == DType::kInt32) return num(int32_t());
  if (t == DType::kInt64) return num(int64_t());
  if (t == DType::kBool) {
    return *got == ((op == ReduceOp::kProd || op == ReduceOp::kMin) ? (*a && *b) : (*a || *b));
  }
  // 16-bit floats: computed in float32, rounded once.
  const int m = t == DType::kFloat16 ? 10 : 7;
  const float want =
      ref(k, op, float(decode16(ld<uint16_t>(a), m)), float(decode16(ld<uint16_t>(b), m)), dv);
  const double max_finite = t == DType::kFloat16 ? 65504 : std::ldexp(255, 120);
  return same(round_to(want, m + 1, m == 10 ? -14 : -126, max_finite),
              decode16(ld<uint16_t>(got), m));
}

// Half of the elements in a narrow exponent range (so sums round, tie and
// cancel), the rest arbitrary bits (NaN, Inf, subnormals, huge values).
Bytes random_data(DType t, size_t n, std::mt19937_64& rng) {
  const size_t w = dtype_size(t);
  Bytes out(n * w);
  for (size_t i = 0; i < n; ++i) {
    uint64_t r = rng();
    const bool narrow = rng() & 1;
    if (narrow && t == DType::kFloat16) r = (r & 0x83ff) | ((12 + r % 7) << 10);
    if (narrow && t == DType::kBFloat16) r = (r & 0x807f) | ((120 + r % 15) << 7);
    if (narrow && t == DType::kFloat32) r = (r & 0x807fffff) | ((120 + r % 15) << 23);
    if (narrow && t == DType::kFloat64) r = (r & 0x800fffffffffffff) | ((1016 + r % 15) << 52);
    if (t == DType::kBool) r = (r % 16 == 0) ? 2 : (r & 1);  // a few non-0/1 bytes
    std::memcpy(&out[i * w], &r, w);
  }
  return out;
}

enum Alias { kNone, kDstIsA, kDstIsB, kAllSame };

// Runs one case and compares every element with the reference.
void check_case(const Kernels& k, Kind kind, DType t, ReduceOp op, int64_t dv, size_t n,
                Alias alias, std::mt19937_64& rng) {
  const size_t w = dtype_size(t), off = (n % 3) * w;  // vary the alignment too
  Bytes a = random_data(t, n + 2, rng), b = random_data(t, n + 2, rng);
  if (alias == kAllSame) b = a;
  const Bytes a0 = a, b0 = b;
  Bytes d(n * w + off + w, 0xAB);
  uint8_t* dst = alias == kNone ? d.data() : alias == kDstIsB ? b.data() : a.data();
  run(k, kind, dst + off, a.data() + off, (alias == kAllSame ? a : b).data() + off, n, t, op, dv);
  for (size_t i = 0; i < n; ++i) {
    const size_t j = off + i * w;
    ASSERT_TRUE(check_elem(t, kind, op, dv, &a0[j], &b0[j], dst + j))
        << k.name << " " << dtype_name(t) << " " << op_name(op) << " kind " << int(kind)
        << " divisor " << dv << " n " << n << " alias " << alias << " at " << i;
  }
  EXPECT_TRUE(alias != kNone || d[off + n * w] == 0xAB) << "wrote past the end";
#if defined(__x86_64__)
  // The generic set must give the same bytes, also under FTZ/DAZ (TensorFlow
  // sets them): then both sets run that way here.
  if (&k != &reduce_internal::kAvx2Kernels) return;
  const unsigned saved_csr = _mm_getcsr();
  for (unsigned csr : {saved_csr, saved_csr | 0x8040u}) {
    _mm_setcsr(csr);
    Bytes d1(n * w + off + w), d2(n * w + off + w);  // + w: &d1[off] exists for n == 0
    run(reduce_internal::kGenericKernels, kind, &d1[off], &a0[off], &b0[off], n, t, op, dv);
    run(k, kind, &d2[off], &a0[off], &b0[off], n, t, op, dv);
    EXPECT_TRUE(csr != saved_csr || !std::memcmp(&d2[off], dst + off, n * w)) << "aliasing";
    _mm_setcsr(saved_csr);
    size_t i = 0;
    while (i < n && std::memcmp(&d1[off + i * w], &d2[off + i * w], w) == 0) ++i;
    ASSERT_EQ(i, n) << dtype_name(t) << " " << op_name(op) << " " << int(kind) << " " << csr;
  }
#endif
}

TEST(Reduce, MatchesReferenceForEveryDtypeOpSizeAndAliasing) {
  std::mt19937_64 rng(1);
  for (const Kernels* k : kernel_sets()) {
    for (DType t = DType(0); t < DType::kCount; t = DType(int(t) + 1)) {
      for (size_t n : {0, 1, 7, 8, 15, 16, 17, 33, 1000, 4099}) {
        for (Alias alias : {kNone, kDstIsA, kDstIsB, kAllSame}) {
          for (ReduceOp op = ReduceOp(0); op < ReduceOp::kCount; op = ReduceOp(int(op) + 1))
            check_case(*k, Kind::kReduce, t, op, 1, n, alias, rng);
          if (t == DType::kBool || alias == kAllSame) continue;
          for (int64_t dv : {int64_t{1}, int64_t{3}, int64_t{7}, int64_t{1} << 40, INT64_MAX}) {
            check_case(*k, Kind::kReduceDivide, t, ReduceOp::kMean, dv, n, alias, rng);
            if (alias != kDstIsB)
              check_case(*k, Kind::kDivide, t, ReduceOp::kMean, dv, n, alias, rng);
          }
        }
      }
    }
  }
}

TEST(Reduce, EdgeCases) {
  constexpr DType H = DType::kFloat16, BF = DType::kBFloat16, F32 = DType::kFloat32,
                  F64 = DType::kFloat64, I8 = DType::kInt8, U8 = DType::kUInt8, I32 = DType::kInt32,
                  I64 = DType::kInt64, B = DType::kBool;
  constexpr ReduceOp kSum = ReduceOp::kSum, kMin = ReduceOp::kMin, kMax = ReduceOp::kMax,
                     kProd = ReduceOp::kProd, kMean = ReduceOp::kMean;
  // clang-format off
  // One element through every kernel set; divisor 0 means reduce, otherwise
  // reduce_divide. Values are the raw bits (low bytes).
  const struct { DType t; ReduceOp op; int64_t a, b, divisor, want; } cases[] = {
      // NaN wins min/max (a's when both are), made quiet; two NaNs sum to a's; min(-1, Inf).
      {F32, kMin, 0x7fc00000, 0x3f800000, 0, 0x7fc00000}, {F32, kMax, 1, 0x7fc00000, 0, 0x7fc00000},
      {F32, kSum, 0x7fc00001, 0x7fc00002, 0, 0x7fc00001}, {H, kMin, 0x3c00, 0x7c01, 0, 0x7e01},
      {F32, kProd, 0x7fc00002, 0x7f800001, 0, 0x7fc00002}, {H, kMax, 0xfe05, 0x3c00, 0, 0xfe05},
      {F32, kMin, 0xbf800000, 0x7f800000, 0, 0xbf800000}, {H, kSum, 0xffe8, 0xfe2c, 0, 0xffe8},
      {F64, kMax, 2, 0x7ff8000000000000, 0, 0x7ff8000000000000}, {BF, kMax, 0x7f81, 2, 0, 0x7fc1},
      // Integers wrap; the mean wraps, then truncates toward zero.
      {I8, kSum, 127, 1, 0, -128},  {I8, kProd, 16, 16, 0, 0},  {I8, kProd, -128, -1, 0, -128},
      {U8, kSum, 255, 2, 0, 1},  {I32, kSum, INT32_MAX, 1, 0, INT32_MIN},  {I8, kMean, -7, 0, 2, -3},
      {I32, kProd, 65536, 65536, 0, 0},  {I64, kSum, INT64_MAX, 1, 0, INT64_MIN},
      {I64, kProd, INT64_MIN, -1, 0, INT64_MIN},  {I8, kMean, 127, 1, 3, -42},
      {I32, kMean, INT32_MIN, 0, 1, INT32_MIN},  {I32, kMean, INT32_MIN, 0, 1LL << 31, -1},
      {I32, kMean, -INT32_MAX, 0, INT32_MAX, -1}, {I32, kMean, -INT32_MAX, 0, INT32_MAX - 1, -1},
      {I64, kMean, INT64_MIN, 0, INT64_MAX, -1}, {U8, kMean, 200, 55, 4, 63},
      // bool is logical, whatever non-zero byte comes in.
      {B, kSum, 1, 1, 0, 1}, {B, kMean, 0, 0, 0, 0}, {B, kMax, 0, 1, 0, 1}, {B, kProd, 1, 0, 0, 0},
      {B, kMin, 2, 4, 0, 1},
      // 16-bit floats round once, to nearest even: ties, overflow, subnormals (ties too),
      // NaN's sign, Inf - Inf (x86's default NaN), 2/3 and 1/3 with one rounding.
      {H, kSum, 0x3c00, 0x1000, 0, 0x3c00}, {H, kSum, 0x3c01, 0x1000, 0, 0x3c02},
      {H, kSum, 0x7bff, 0x4800, 0, 0x7bff}, {H, kSum, 0x7bff, 0x4c00, 0, 0x7c00},
      {H, kProd, 0xfbff, 0x4000, 0, 0xfc00}, {H, kSum, 1, 1, 0, 2}, {H, kSum, 0x3ff, 1, 0, 0x400},
      {H, kProd, 1, 0x3800, 0, 0}, {H, kProd, 0x8003, 0x3800, 0, 0x8002},
      {H, kSum, 0xfe00, 0x3c00, 0, 0xfe00}, {H, kSum, 0x7c00, 0xfc00, 0, 0xfe00},
      {H, kMean, 0x3c00, 0x3c00, 3, 0x3955}, {BF, kSum, 0x3f80, 0x3b80, 0, 0x3f80},
      {BF, kSum, 0x3f81, 0x3b80, 0, 0x3f82}, {BF, kSum, 0x7f7f, 0x7f7f, 0, 0x7f80},
      {BF, kSum, 1, 1, 0, 2}, {BF, kSum, 0xffc1, 0x3f80, 0, 0xffc1}, {BF, kMean, 0x3f80, 0, 3, 0x3eab},
  };
  // clang-format on
  for (const auto& c : cases) {
    for (const Kernels* k : kernel_sets()) {
      int64_t out = 0, want = 0;
      const size_t w = dtype_size(c.t);
      std::memcpy(&want, &c.want, w);
      if (c.divisor == 0) k->reduce(&out, &c.a, &c.b, 1, c.t, c.op);
      if (c.divisor != 0) k->reduce_divide(&out, &c.a, &c.b, 1, c.t, c.divisor);
      EXPECT_EQ(out, want) << k->name << " " << dtype_name(c.t) << " " << op_name(c.op) << " "
                           << std::hex << c.a << " " << c.b;
    }
  }
  int32_t v[3] = {-9, 9, -1};
  divide(v, v, 3, DType::kInt32, 4);
  EXPECT_EQ(std::vector<int32_t>(v, v + 3), (std::vector<int32_t>{-2, 2, 0}));
}

// reduce_many against the pairwise chain of the same kernel set (checked above against the
// references), bit for bit: every dtype and op, 2..9 sources (one, two and three fused
// groups and each remainder), sizes around the vector width, dst apart or == srcs[0], with
// and without the mean's division; the AVX2 set against the generic one, also under FTZ/DAZ.
TEST(Reduce, ManySourcesMatchThePairwiseChain) {
  std::mt19937_64 rng(2);
  auto chain = [](const Kernels& k, void* d, const std::vector<const void*>& s, size_t n, DType t,
                  ReduceOp op, int64_t dv) {
    const void* acc = s[0];
    for (size_t r = 1; r < s.size(); ++r) {
      if (dv > 0 && r + 1 == s.size()) {
        k.reduce_divide(d, acc, s[r], n, t, dv);
      } else {
        k.reduce(d, acc, s[r], n, t, op);
      }
      acc = d;
    }
  };
  for (DType t = DType(0); t < DType::kCount; t = DType(int(t) + 1)) {
    const size_t w = dtype_size(t);
    for (size_t m = 2; m <= 9; ++m) {
      for (size_t n : {1, 7, 31, 33, 1000, 2100}) {  // 2100: over a streaming block
        std::vector<Bytes> in;
        for (size_t r = 0; r < m; ++r) in.push_back(random_data(t, n, rng));
        for (ReduceOp op = ReduceOp(0); op < ReduceOp::kCount; op = ReduceOp(int(op) + 1)) {
          const bool sums = op == ReduceOp::kSum || op == ReduceOp::kMean;
          for (int64_t dv : {int64_t{0}, int64_t{3}, INT64_MAX}) {
            if (dv > 0 && (!sums || t == DType::kBool)) continue;
            Bytes want(n * w, 0xAB);
            {
              std::vector<const void*> ptr;
              for (const Bytes& b : in) ptr.push_back(b.data());
              chain(*kernel_sets()[0], want.data(), ptr, n, t, op, dv);
            }
            // dst apart (16-byte aligned, or not: the streaming path then stores plainly),
            // or dst == srcs[0].
            for (int place : {0, 1, 2}) {
              for (bool stream : {false, true}) {
                for (const Kernels* k : kernel_sets()) {
                  std::vector<Bytes> src = in;
                  std::vector<const void*> ptr;
                  for (const Bytes& b : src) ptr.push_back(b.data());
                  Bytes out(n * w + 2 * w, 0xAB);
                  uint8_t* dst = place == 2 ? src[0].data() : out.data() + place * w;
                  k->reduce_many(dst, ptr.data(), m, n, t, op, dv, stream);
                  ASSERT_EQ(0, std::memcmp(dst, want.data(), n * w))
                      << k->name << " " << dtype_name(t) << " " << op_name(op) << " m " << m
                      << " n " << n << " divisor " << dv << " place " << place << " stream "
                      << stream;
                  EXPECT_EQ(out[n * w + w], 0xAB) << "wrote past the end";
                  for (size_t r = 1; r < m; ++r) ASSERT_EQ(src[r], in[r]) << "a source changed";
                }
              }
            }
          }
        }
      }
    }
  }
#if defined(__x86_64__)
  if (!reduce_internal::cpu_has_avx2()) return;
  const unsigned saved_csr = _mm_getcsr();
  _mm_setcsr(saved_csr | 0x8040u);  // FTZ/DAZ, as TensorFlow runs
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    std::vector<Bytes> in;
    for (int r = 0; r < 5; ++r) in.push_back(random_data(t, 999, rng));
    std::vector<const void*> ptr;
    for (const Bytes& b : in) ptr.push_back(b.data());
    Bytes g(999 * dtype_size(t)), a(g.size());
    for (size_t m : {4, 5}) {
      reduce_internal::kGenericKernels.reduce_many(g.data(), ptr.data(), m, 999, t, {}, 7, false);
      reduce_internal::kAvx2Kernels.reduce_many(a.data(), ptr.data(), m, 999, t, {}, 7, true);
      EXPECT_EQ(g, a) << dtype_name(t) << " " << m;
    }
  }
  _mm_setcsr(saved_csr);
#endif
}

// The public entry point: one source copies (or divides), and the same bytes as the kernels.
TEST(Reduce, ManySourcesPublicEntryPoint) {
  const float a[3] = {1, 2, 3}, b[3] = {10, 20, 30}, c[3] = {100, 200, 301};
  const void* one[] = {a};
  const void* three[] = {a, b, c};
  float out[3] = {};
  reduce_many(out, one, 1, 3, DType::kFloat32, ReduceOp::kSum, 0);
  EXPECT_EQ(std::vector<float>(out, out + 3), (std::vector<float>{1, 2, 3}));
  reduce_many(out, one, 1, 3, DType::kFloat32, ReduceOp::kMean, 2);
  EXPECT_EQ(std::vector<float>(out, out + 3), (std::vector<float>{0.5f, 1, 1.5f}));
  reduce_many(out, three, 3, 3, DType::kFloat32, ReduceOp::kMean, 3);
  EXPECT_EQ(std::vector<float>(out, out + 3), (std::vector<float>{37, 74, 334.0f / 3}));
  reduce_many(out, three, 3, 3, DType::kFloat32, ReduceOp::kMax, 0);
  EXPECT_EQ(std::vector<float>(out, out + 3), (std::vector<float>{100, 200, 301}));
}

bool rejected(void (*fn)()) {
  try {
    fn();
  } catch (const Error& e) {
    return e.kind() == ErrorKind::kInvalidArgument;
  }
  return false;
}

TEST(Reduce, RejectsBadArguments) {
  static uint8_t x[8];
  EXPECT_TRUE(rejected([] { reduce_divide(x, x, x, 1, DType::kBool, 2); }));  // no bool mean
  EXPECT_TRUE(rejected([] { divide(x, x, 1, DType::kFloat32, 0); }));
  EXPECT_TRUE(rejected([] { reduce(x, x, x, 1, DType(9), ReduceOp::kSum); }));
  EXPECT_TRUE(rejected([] { reduce(x, x, x, 1, DType::kFloat32, ReduceOp(5)); }));
  static const void* srcs[2] = {x, nullptr};
  EXPECT_TRUE(rejected([] { reduce_many(x, srcs, 0, 1, DType::kFloat32, ReduceOp::kSum, 0); }));
  EXPECT_TRUE(rejected([] { reduce_many(x, srcs, 2, 1, DType::kFloat32, ReduceOp::kSum, 0); }));
  EXPECT_TRUE(rejected([] { reduce_many(x, srcs, 1, 1, DType::kFloat32, ReduceOp::kMax, 2); }));
  EXPECT_TRUE(rejected([] { reduce_many(x, srcs, 1, 1, DType::kFloat32, ReduceOp::kSum, -1); }));
  EXPECT_TRUE(rejected([] { reduce_many(x, srcs, 1, 1, DType::kBool, ReduceOp::kSum, 2); }));
  reduce(nullptr, nullptr, nullptr, 0, DType::kFloat32, ReduceOp::kSum);  // n == 0: no-op
  EXPECT_TRUE(std::string(reduce_isa()) == "avx2" || std::string(reduce_isa()) == "generic");
}

TEST(ReduceDeathTest, EnvironmentForcesGeneric) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: the choice is cached
  // Exits 0 when setenv succeeds (0) and reduce_isa() then says "generic".
  EXPECT_EXIT(std::exit(setenv("PYTFCOMM_REDUCE_ISA", "generic", 1) ||
                        std::strcmp(reduce_isa(), "generic") != 0),
              testing::ExitedWithCode(0), "");
}

// Prints, does not assert: timings on shared machines are noisy.
TEST(Reduce, Throughput) {
#ifdef PYTFCOMM_SANITIZED
  const size_t n = (1 << 20) / sizeof(float);  // the same code paths; the figures mean nothing
#else
  const size_t n = (64 << 20) / sizeof(float);
#endif
  std::vector<float> a(n, 1.f), b(n, 2.f), d(n);
  for (const Kernels* k : kernel_sets()) {
    for (float* dst : {d.data(), a.data()}) {
      k->reduce(dst, a.data(), b.data(), n, DType::kFloat32, ReduceOp::kSum);  // warm up
      const auto t0 = std::chrono::steady_clock::now();
      for (int r = 0; r < 10; ++r) k->reduce(dst, a.data(), b.data(), n, DType::kFloat32, {});
      const std::chrono::duration<double> s = std::chrono::steady_clock::now() - t0;
      std::printf("[ reduce   ] %-7s float32 sum %zu MiB, %s: %.1f GB/s of output\n", k->name,
                  n * 4 >> 20, dst == a.data() ? "dst == a" : "dst apart",
                  10 * n * 4 / s.count() / 1e9);
    }
    // Four sources into one, as the local combine of four replicas: fused vs the chain.
    std::vector<float> c(n, 3.f), e(n, 4.f);
    const void* srcs[4] = {a.data(), b.data(), c.data(), e.data()};
    for (bool fused : {true, false}) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int r = 0; r < 5; ++r) {
        if (fused) {
          k->reduce_many(d.data(), srcs, 4, n, DType::kFloat32, ReduceOp::kSum, 0, true);
        } else {
          k->reduce(d.data(), a.data(), b.data(), n, DType::kFloat32, ReduceOp::kSum);
          k->reduce(d.data(), d.data(), c.data(), n, DType::kFloat32, ReduceOp::kSum);
          k->reduce(d.data(), d.data(), e.data(), n, DType::kFloat32, ReduceOp::kSum);
        }
      }
      const std::chrono::duration<double> s = std::chrono::steady_clock::now() - t0;
      std::printf("[ reduce   ] %-7s float32 sum of 4 x %zu MiB, %s: %.1f GB/s of output\n",
                  k->name, n * 4 >> 20, fused ? "fused, streamed" : "chain",
                  5 * n * 4 / s.count() / 1e9);
    }
  }
}

}  // namespace
}  // namespace pytfcomm
