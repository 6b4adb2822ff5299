// Non-cryptographic digests the ranks compare: FNV-1a (list digests,
// collective streams, fusion and GPU group tags) and the CRC-32 of Python's
// repr of a shape (the NumPy API's shape tags). Tiny, fast on short inputs
// and the same on every platform, which is all a digest compared across
// ranks needs. Their values are part of the wire (tests/cpp/test_digest.cc).
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "common/crc32.h"

namespace pytfcomm {

template <typename Hash>
struct Fnv;
template <>
struct Fnv<uint32_t> {
  static constexpr uint32_t kOffset = 2166136261u;
  static constexpr uint32_t kPrime = 16777619u;
};
template <>
struct Fnv<uint64_t> {
  static constexpr uint64_t kOffset = 14695981039346656037ULL;
  static constexpr uint64_t kPrime = 1099511628211ULL;
};
constexpr uint64_t kFnv64Offset = Fnv<uint64_t>::kOffset;

template <typename Hash>
constexpr Hash fnv1a(const void* data, size_t n, Hash h = Fnv<Hash>::kOffset) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = static_cast<Hash>((h ^ p[i]) * Fnv<Hash>::kPrime);
  return h;
}
// Mixes the 8 little-endian bytes of `v` into `h`.
template <typename Hash>
constexpr Hash fnv1a_mix(Hash h, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    h = static_cast<Hash>((h ^ ((v >> (8 * i)) & 0xff)) * Fnv<Hash>::kPrime);
  return h;
}

inline uint64_t fnv1a64(const void* data, size_t n, uint64_t h = kFnv64Offset) {
  return fnv1a<uint64_t>(data, n, h);
}
inline uint64_t fnv1a64(std::string_view s, uint64_t h = kFnv64Offset) {
  return fnv1a<uint64_t>(s.data(), s.size(), h);
}
inline uint64_t fnv1a64_mix(uint64_t h, uint64_t v) { return fnv1a_mix<uint64_t>(h, v); }

// FNV-1a of a list of fields (counts, dtypes, dimensions), each mixed in as
// its 8 little-endian bytes.
template <typename Hash>
class FieldDigest {
 public:
  FieldDigest& mix(uint64_t v) {
    h_ = fnv1a_mix(h_, v);
    return *this;
  }
  Hash value() const { return h_; }
  // Never 0, which means "no shape" in a message's shape tag.
  Hash nonzero() const { return h_ == 0 ? 1 : h_; }

 private:
  Hash h_ = Fnv<Hash>::kOffset;
};
using FieldDigest32 = FieldDigest<uint32_t>;

namespace detail {
// Python's repr of a tuple of ints: "()", "(7,)", "(2, 3)".
template <typename Int>
void add_shape_repr(Crc32& crc, const Int* dims, size_t n) {
  crc.add("(");
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) crc.add(", ");
    char digits[24];
    const int64_t v = static_cast<int64_t>(dims[i]);
    const char* end = std::to_chars(digits, digits + sizeof(digits), v).ptr;
    crc.add({digits, static_cast<size_t>(end - digits)});
  }
  crc.add(n == 1 ? ",)" : ")");
}
}  // namespace detail

// zlib.crc32(repr(tuple(dims)).encode()): the shape tag of the NumPy API's
// collectives, the same whether Python or the bindings' fast path computes it.
template <typename Int>
uint32_t shape_digest(const Int* dims, size_t n) {
  Crc32 crc;
  detail::add_shape_repr(crc, dims, n);
  return crc.value();
}

// zlib.crc32(repr([tuple(s) for s in shapes]).encode()): the shape tag of a
// fused all-reduce of a list of arrays.
inline uint32_t shapes_digest(const std::vector<std::vector<int64_t>>& shapes) {
  Crc32 crc;
  crc.add("[");
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (i > 0) crc.add(", ");
    detail::add_shape_repr(crc, shapes[i].data(), shapes[i].size());
  }
  crc.add("]");
  return crc.value();
}

}  // namespace pytfcomm
