#include "local/buffer_cache.h"

#include <pthread.h>
#include <sys/mman.h>

#include "common/param.h"

namespace pytfcomm {
namespace {

constexpr size_t kPage = 4096;
constexpr size_t kHuge = 2 << 20;

void* map(size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
#ifdef MADV_HUGEPAGE
  // One fault per 2 MiB instead of per 4 KiB where THP is in madvise mode;
  // harmless (EINVAL) where it is off.
  if (bytes >= kHuge) ::madvise(p, bytes, MADV_HUGEPAGE);
#endif
  return p;
}

}  // namespace

size_t BufferCache::size_class(size_t bytes) {
  // Whole huge pages from 2 MiB (so THP can back all of it), pages below.
  // Gradient shapes repeat every step, so exact classes are hit again.
  const size_t unit = bytes >= kHuge ? kHuge : kPage;
  return (bytes + unit - 1) / unit * unit;
}

BufferCache::~BufferCache() {
  for (auto& [bytes, p] : idle_) ::munmap(p, bytes);
}

void* BufferCache::take(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t cls = size_class(bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = idle_.find(cls);
    if (it != idle_.end()) {
      void* p = it->second;
      idle_.erase(it);
      stats_.idle_bytes -= cls;
      stats_.in_use_bytes += cls;
      ++stats_.hits;
      in_use_.emplace(p, cls);
      return p;
    }
  }
  void* p = map(cls);
  if (p == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.misses;
  stats_.in_use_bytes += cls;
  in_use_.emplace(p, cls);
  return p;
}

bool BufferCache::give(void* p) {
  size_t cls;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = in_use_.find(p);
    if (it == in_use_.end()) return false;
    cls = it->second;
    in_use_.erase(it);
    stats_.in_use_bytes -= cls;
    if (stats_.idle_bytes + cls <= idle_cap_) {
      idle_.emplace(cls, p);
      stats_.idle_bytes += cls;
      return true;
    }
  }
  ::munmap(p, cls);
  return true;
}

BufferCache::Stats BufferCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

BufferCache& tf_buffer_cache() {
  static BufferCache* cache = [] {
    auto* c = new BufferCache(static_cast<size_t>(params().tf_buffer_cache_bytes));
    ::pthread_atfork([] { tf_buffer_cache().lock_for_fork(); },
                     [] { tf_buffer_cache().unlock_after_fork(); },
                     [] { tf_buffer_cache().unlock_after_fork(); });
    return c;
  }();
  return *cache;
}

}  // namespace pytfcomm
