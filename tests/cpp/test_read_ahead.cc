// The read-ahead TCP stream: bytes read into memory early come out first and
// in order, peeks see across the memory/socket boundary, and the end of the
// stream (EOF or an error) is reported only after the bytes before it.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <numeric>
#include <vector>

#include "transport/host/pair.h"
#include "transport/tcp/read_ahead_stream.h"
#include "transport/tcp/socket_stream.h"
#include "transport/wire.h"

namespace pytfcomm {
namespace {

struct Link {
  std::unique_ptr<tcp::SocketStream> writer;
  std::unique_ptr<tcp::ReadAheadStream> reader;
  explicit Link(size_t cap) {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    writer = std::make_unique<tcp::SocketStream>(net::Fd(sv[0]));
    reader = std::make_unique<tcp::ReadAheadStream>(
        std::make_unique<tcp::SocketStream>(net::Fd(sv[1])), cap);
  }
  void send(const std::vector<uint8_t>& v) {
    iovec iov{const_cast<uint8_t*>(v.data()), v.size()};
    ASSERT_EQ(writer->writev_some(&iov, 1), static_cast<ssize_t>(v.size()));
  }
};

std::vector<uint8_t> bytes(size_t n, uint8_t first) {
  std::vector<uint8_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

TEST(ReadAheadStream, EarlyBytesComeFirstThenTheSocket) {
  Link l(1000);
  l.send(bytes(700, 0));
  EXPECT_TRUE(l.reader->read_ahead());
  EXPECT_EQ(l.reader->buffered(), 700u);
  EXPECT_FALSE(l.reader->read_ahead());  // nothing new: would block
  l.send(bytes(600, 188));               // 700 + 600 continues the byte pattern
  EXPECT_TRUE(l.reader->read_ahead());
  EXPECT_EQ(l.reader->buffered(), 1000u);  // capped; the rest stays in the kernel
  uint8_t head[8];
  ASSERT_EQ(l.reader->peek(head, 8), 8);
  EXPECT_EQ(head[0], 0);
  std::vector<uint8_t> got(1300);
  size_t n = 0;
  while (n < got.size()) {
    ssize_t r = l.reader->read_some(got.data() + n, std::min<size_t>(333, got.size() - n));
    ASSERT_GT(r, 0);
    n += static_cast<size_t>(r);
  }
  EXPECT_EQ(got, bytes(1300, 0));
}

TEST(ReadAheadStream, PeekSpansMemoryAndSocket) {
  Link l(16);
  l.send(bytes(40, 10));
  EXPECT_TRUE(l.reader->read_ahead());
  uint8_t p[40];
  ASSERT_EQ(l.reader->peek(p, 40), 40);
  EXPECT_EQ(std::vector<uint8_t>(p, p + 40), bytes(40, 10));
  uint8_t r[40];
  ASSERT_EQ(l.reader->read_some(r, 40), 16);  // memory first
  ASSERT_EQ(l.reader->read_some(r + 16, 24), 24);
  EXPECT_EQ(std::vector<uint8_t>(r, r + 40), bytes(40, 10));
}

TEST(ReadAheadStream, EofOnlyAfterTheBytesBeforeIt) {
  Link l(4096);
  l.send(bytes(100, 1));
  l.writer->close();
  l.reader->read_ahead();
  uint8_t buf[200];
  EXPECT_EQ(l.reader->read_some(buf, 200), 100);
  EXPECT_EQ(l.reader->read_some(buf, 200), 0);
  EXPECT_EQ(l.reader->peek(buf, 10), 0);
}

TEST(ReadAheadStream, NothingThereWouldBlock) {
  Link l(4096);
  EXPECT_FALSE(l.reader->read_ahead());
  uint8_t buf[4];
  errno = 0;
  EXPECT_EQ(l.reader->read_some(buf, 4), -1);
  EXPECT_EQ(errno, EAGAIN);
}

struct Recorder : transport::StatusObserver {
  std::vector<int> from;
  TimePoint on_block(TimePoint) noexcept override { return TimePoint::max(); }
  void on_status(int peer, const transport::MessageMeta&, uint32_t) noexcept override {
    from.push_back(peer);
  }
};

// A stalled rank asks its peers where they are and gets the answer back
// while its question (a send) is still in progress; the pair reads the
// answer ahead into memory. The socket's readiness edge is then spent, so
// the answer must be taken right there: before the fix it sat unread in
// memory and the asker named a rank that had answered as hung.
TEST(ReadAheadPair, StatusFrameReadAheadReachesTheObserver) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  host::Pair asker(1,
                   std::make_unique<tcp::ReadAheadStream>(
                       std::make_unique<tcp::SocketStream>(net::Fd(sv[0])), 1 << 20),
                   "rank 1 (test)", 1 << 30);
  host::Pair answerer(0, std::make_unique<tcp::SocketStream>(net::Fd(sv[1])), "rank 0 (test)",
                      1 << 30);
  Recorder seen;
  asker.set_status_observer(&seen);
  transport::MessageMeta m;
  m.seq = 9;
  ASSERT_TRUE(answerer.send_status(m, transport::kStatusInCollective));
  answerer.progress("barrier #9");  // the answer is in asker's socket now
  char payload[64] = {};
  asker.post_send(payload, sizeof(payload), m);
  asker.progress("barrier #9");  // sends; receives nothing (none posted)
  EXPECT_TRUE(seen.from.empty());
  // About to sleep with nothing posted to receive: it reads ahead.
  EXPECT_TRUE(asker.read_ahead("barrier #9"));
  EXPECT_EQ(seen.from, std::vector<int>{1});
  EXPECT_TRUE(asker.idle());
}

}  // namespace
}  // namespace pytfcomm
