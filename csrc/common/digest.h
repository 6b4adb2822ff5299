// Non-cryptographic digests the ranks compare (shape tags, list digests,
// collective streams). FNV-1a: tiny, fast on short inputs, and the same on
// every platform, which is all a digest compared across ranks needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pytfcomm {

constexpr uint64_t kFnv64Offset = 14695981039346656037ULL;
constexpr uint64_t kFnv64Prime = 1099511628211ULL;

inline uint64_t fnv1a64(const void* data, size_t n, uint64_t h = kFnv64Offset) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * kFnv64Prime;
  return h;
}
inline uint64_t fnv1a64(std::string_view s, uint64_t h = kFnv64Offset) {
  return fnv1a64(s.data(), s.size(), h);
}
// Mixes the 8 little-endian bytes of `v` into `h`.
inline uint64_t fnv1a64_mix(uint64_t h, uint64_t v) {
  for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xff)) * kFnv64Prime;
  return h;
}

}  // namespace pytfcomm
