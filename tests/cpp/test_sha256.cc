// SHA-256 against FIPS 180-2 examples and HMAC-SHA256 against RFC 4231.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "common/sha256.h"

namespace pytfcomm {
namespace {

std::string hex(const Digest& d) {
  std::string s;
  char b[3];
  for (uint8_t x : d) {
    std::snprintf(b, sizeof(b), "%02x", x);
    s += b;
  }
  return s;
}

std::string hmac(const std::string& key, const std::string& data) {
  HmacSha256 h(key);
  h.update(data.data(), data.size());
  return hex(h.finish());
}

TEST(Sha256, Fips180Examples) {
  EXPECT_EQ(hex(sha256("", 0)), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(sha256("abc", 3)),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(hex(sha256(two_blocks.data(), two_blocks.size())),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  std::string million(1000000, 'a');
  EXPECT_EQ(hex(sha256(million.data(), million.size())),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, StreamingMatchesOneShotAtEveryPaddingBoundary) {
  std::string data(300, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + 1);
  for (size_t n = 0; n <= data.size(); n += 1) {
    Sha256 s;
    size_t chunk = 1 + n % 13;
    for (size_t off = 0; off < n; off += chunk)
      s.update(data.data() + off, std::min(chunk, n - off));
    ASSERT_EQ(hex(s.finish()), hex(sha256(data.data(), n))) << n;
  }
}

TEST(HmacSha256, Rfc4231) {
  EXPECT_EQ(hmac(std::string(20, '\x0b'), "Hi There"),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hmac("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(hmac(std::string(20, '\xaa'), std::string(50, '\xdd')),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  std::string key4;
  for (int i = 1; i <= 25; ++i) key4 += static_cast<char>(i);
  EXPECT_EQ(hmac(key4, std::string(50, '\xcd')),
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  // Keys longer than a block are hashed first.
  EXPECT_EQ(
      hmac(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First"),
      "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  EXPECT_EQ(hmac(std::string(131, '\xaa'),
                 "This is a test using a larger than block-size key and a larger than block-size "
                 "data. The key needs to be hashed before being used by the HMAC algorithm."),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST(ConstantTimeEqual, ComparesEveryByte) {
  uint8_t a[32] = {}, b[32] = {};
  EXPECT_TRUE(constant_time_equal(a, b, 32));
  for (int i : {0, 17, 31}) {
    b[i] = 1;
    EXPECT_FALSE(constant_time_equal(a, b, 32)) << i;
    b[i] = 0;
  }
  EXPECT_TRUE(constant_time_equal(a, b, 0));
}

}  // namespace
}  // namespace pytfcomm
