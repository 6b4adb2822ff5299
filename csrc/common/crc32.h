// CRC-32 (IEEE 802.3, the one zlib.crc32 computes), for short strings such
// as the shape digests collectives carry (common/digest.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pytfcomm {

namespace detail {
constexpr std::array<uint32_t, 256> make_crc32_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  return t;
}
inline constexpr std::array<uint32_t, 256> kCrc32Table = make_crc32_table();
}  // namespace detail

// A running CRC-32: text added in pieces digests as if added at once.
class Crc32 {
 public:
  Crc32& add(std::string_view s) {
    for (char ch : s) c_ = detail::kCrc32Table[(c_ ^ static_cast<uint8_t>(ch)) & 0xFF] ^ (c_ >> 8);
    return *this;
  }
  uint32_t value() const { return c_ ^ 0xFFFFFFFFu; }

 private:
  uint32_t c_ = 0xFFFFFFFFu;
};

inline uint32_t crc32(const char* data, size_t n) { return Crc32().add({data, n}).value(); }

}  // namespace pytfcomm
