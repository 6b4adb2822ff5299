// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), self-contained so that
// wheels need no OpenSSL. Used only for the connection handshake, where
// speed does not matter; clarity and exactness do.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace pytfcomm {

using Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  Digest finish();  // the object must not be used afterwards

 private:
  void block(const uint8_t* p);

  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;  // bytes hashed so far
};

Digest sha256(const void* data, size_t n);

// Streaming HMAC-SHA256 so a transcript can be fed piece by piece.
class HmacSha256 {
 public:
  HmacSha256(const void* key, size_t key_len);
  explicit HmacSha256(const std::string& key) : HmacSha256(key.data(), key.size()) {}
  void update(const void* data, size_t n) { inner_.update(data, n); }
  Digest finish();

 private:
  Sha256 inner_;
  uint8_t okey_[64];
};

// Equality in time independent of where the inputs differ, so a MAC check
// leaks nothing about how many leading bytes a forgery got right.
bool constant_time_equal(const uint8_t* a, const uint8_t* b, size_t n);

}  // namespace pytfcomm
