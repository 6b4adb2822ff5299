// Multi-stream TCP's byte stream on its own: k socket pairs with tiny
// buffers, random write and read sizes, so stripes end mid-frame, writes stop
// part-way and reads straddle connections; the bytes must arrive in order.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <vector>

#include "transport/tcp/striped_stream.h"

namespace pytfcomm {
namespace {

struct Striped {
  std::unique_ptr<tcp::StripedStream> a, b;  // a writes, b reads (and back)
  Striped(int k, size_t stripe, int sockbuf) {
    std::vector<net::Fd> left, right;
    for (int i = 0; i < k; ++i) {
      int sv[2];
      EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
      for (int fd : sv) ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sockbuf, sizeof(sockbuf));
      left.emplace_back(sv[0]);
      right.emplace_back(sv[1]);
    }
    a = std::make_unique<tcp::StripedStream>(std::move(left), stripe);
    b = std::make_unique<tcp::StripedStream>(std::move(right), stripe);
  }
};

class StripedStreamTest : public ::testing::TestWithParam<int> {};

TEST_P(StripedStreamTest, BytesArriveInOrderWhateverTheCuts) {
  const int k = GetParam();
  Striped s(k, 1000, 4096);  // 1000: stripes never line up with the 2^n sizes below
  std::mt19937 rng(k);
  const size_t total = 3'000'000;
  std::vector<uint8_t> src(total), dst(total);
  for (size_t i = 0; i < total; ++i) src[i] = static_cast<uint8_t>(i * 131 + i / 977);
  size_t sent = 0, got = 0;
  for (int spins = 0; got < total && spins < 10'000'000; ++spins) {
    if (sent < total) {
      // Two or three iovecs of random lengths, like header + payload.
      iovec iov[3];
      int n = 1 + static_cast<int>(rng() % 3);
      size_t off = sent;
      for (int i = 0; i < n; ++i) {
        size_t len = std::min<size_t>(total - off, rng() % 9000);
        iov[i] = {src.data() + off, len};
        off += len;
      }
      ssize_t w = s.a->writev_some(iov, n);
      ASSERT_TRUE(w >= 0 || errno == EAGAIN) << std::strerror(errno);
      if (w > 0) sent += static_cast<size_t>(w);
    }
    uint8_t head[64];
    ssize_t p = s.b->peek(head, std::min<size_t>(sizeof(head), total - got));
    size_t want = std::min<size_t>(total - got, 1 + rng() % 7000);
    ssize_t r = s.b->read_some(dst.data() + got, want);
    ASSERT_TRUE(r >= 0 || errno == EAGAIN) << std::strerror(errno);
    if (r > 0) {
      // What peek saw is what read then took.
      if (p > 0) {
        size_t same = std::min<size_t>(static_cast<size_t>(p), static_cast<size_t>(r));
        ASSERT_EQ(std::memcmp(head, dst.data() + got, same), 0) << "peek differs at " << got;
      }
      got += static_cast<size_t>(r);
    }
  }
  ASSERT_EQ(got, total);
  EXPECT_EQ(dst, src);
}

TEST_P(StripedStreamTest, ClosedPeerReadsAsEof) {
  Striped s(GetParam(), 512, 4096);
  uint8_t x[100] = {1, 2, 3};
  iovec iov{x, sizeof(x)};
  ASSERT_EQ(s.a->writev_some(&iov, 1), 100);
  s.a->close();
  uint8_t y[200];
  EXPECT_EQ(s.b->read_some(y, sizeof(y)), 100);
  EXPECT_EQ(s.b->read_some(y, sizeof(y)), 0);
}

INSTANTIATE_TEST_SUITE_P(Streams, StripedStreamTest, ::testing::Values(1, 2, 3, 5));

}  // namespace
}  // namespace pytfcomm
