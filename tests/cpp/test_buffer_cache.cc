// The TF ops' output-buffer cache (local/buffer_cache.h): reuse by size
// class, never handing out a buffer that is still in use, the idle cap.
#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "local/buffer_cache.h"

namespace pytfcomm {
namespace {

TEST(BufferCache, SizeClassesArePagesBelowTwoMiBAndHugePagesAbove) {
  EXPECT_EQ(BufferCache::size_class(1), 4096u);
  EXPECT_EQ(BufferCache::size_class(4096), 4096u);
  EXPECT_EQ(BufferCache::size_class(4097), 8192u);
  EXPECT_EQ(BufferCache::size_class(2 << 20), size_t{2} << 20);
  EXPECT_EQ(BufferCache::size_class((2 << 20) + 1), size_t{4} << 20);
  EXPECT_EQ(BufferCache::size_class(16 << 20), size_t{16} << 20);
}

TEST(BufferCache, ReleasedBufferIsReusedForTheSameClass) {
  BufferCache cache(64 << 20);
  void* a = cache.take(3 << 20);
  ASSERT_NE(a, nullptr);
  std::memset(a, 7, 3 << 20);  // writable over its whole length
  EXPECT_TRUE(cache.give(a));
  EXPECT_EQ(cache.stats().idle_bytes, size_t{4} << 20);
  void* b = cache.take((3 << 20) + 100);  // same 4 MiB class
  EXPECT_EQ(a, b);
  EXPECT_EQ(cache.stats().hits, 1);
  EXPECT_EQ(cache.stats().misses, 1);
  EXPECT_EQ(cache.stats().idle_bytes, 0u);
  EXPECT_TRUE(cache.give(b));
}

TEST(BufferCache, BuffersInUseAreNeverHandedOutTwice) {
  BufferCache cache(64 << 20);
  std::set<void*> live;
  for (int i = 0; i < 8; ++i) {
    void* p = cache.take(1 << 20);
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(live.insert(p).second) << "buffer " << i << " handed out while in use";
  }
  EXPECT_EQ(cache.stats().in_use_bytes, size_t{8} << 20);
  for (void* p : live) EXPECT_TRUE(cache.give(p));
  EXPECT_EQ(cache.stats().in_use_bytes, 0u);
}

TEST(BufferCache, IdleBytesStayUnderTheCap) {
  BufferCache cache(5 << 20);
  void* a = cache.take(4 << 20);
  void* b = cache.take(4 << 20);
  EXPECT_TRUE(cache.give(a));
  EXPECT_TRUE(cache.give(b));  // over the cap: unmapped, not kept
  EXPECT_EQ(cache.stats().idle_bytes, size_t{4} << 20);
  BufferCache none(0);
  void* c = none.take(4096);
  EXPECT_TRUE(none.give(c));
  EXPECT_EQ(none.stats().idle_bytes, 0u);
}

TEST(BufferCache, UnknownAndDoubleReleasesAreIgnored) {
  BufferCache cache(1 << 20);
  int local = 0;
  EXPECT_FALSE(cache.give(&local));
  void* p = cache.take(100);
  EXPECT_TRUE(cache.give(p));
  EXPECT_FALSE(cache.give(p));
  EXPECT_EQ(cache.take(0), nullptr);
}

}  // namespace
}  // namespace pytfcomm
