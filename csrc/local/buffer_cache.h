// A cache of large, already-faulted host buffers for the outputs of the TF
// ops and of NumPy collectives called without `out=`. TF's default CPU
// allocator hands every op a fresh malloc'd buffer; for multi-MiB outputs
// glibc returns that memory to the kernel on free, so each step pays one page
// fault per 4 KiB page on first write (measured: ~35 ms for 16 MiB on a
// 2-vCPU VM, ten times the all-reduce itself). Buffers taken here are mapped
// with transparent huge pages where the kernel allows it, and kept after
// release for the next request of the same size class, up to a cap on idle
// bytes (PYTFCOMM_TF_BUFFER_CACHE). Thread-safe; TF-free so it can be tested
// alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace pytfcomm {

class BufferCache {
 public:
  // idle_cap_bytes: most bytes kept while unused (0: cache nothing, every
  // release unmaps).
  explicit BufferCache(size_t idle_cap_bytes) : idle_cap_(idle_cap_bytes) {}
  BufferCache(const BufferCache&) = delete;
  BufferCache& operator=(const BufferCache&) = delete;
  ~BufferCache();

  // A page-aligned buffer of at least `bytes` (> 0), or nullptr when the
  // system has no memory for it. Contents are unspecified.
  void* take(size_t bytes);
  // Hands back a buffer from take(); kept for reuse while idle bytes stay
  // under the cap, unmapped otherwise. Unknown pointers are ignored (false).
  bool give(void* p);

  // The size class a request of `bytes` is served from.
  static size_t size_class(size_t bytes);

  struct Stats {
    int64_t hits = 0;         // take() served from the cache
    int64_t misses = 0;       // take() that mapped new memory
    size_t idle_bytes = 0;    // held for reuse now
    size_t in_use_bytes = 0;  // handed out and not yet given back
  };
  Stats stats() const;

  // pthread_atfork hooks: hold the lock across fork(), so that the child's
  // copy is never left locked by a thread that does not exist there.
  void lock_for_fork() { mu_.lock(); }
  void unlock_after_fork() { mu_.unlock(); }

 private:
  const size_t idle_cap_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> idle_;         // size class -> buffer
  std::unordered_map<void*, size_t> in_use_;  // buffer -> size class
  Stats stats_;
};

// The process-wide cache for the outputs of the TF ops and of NumPy
// collectives called without `out=` (never destroyed: tensors and arrays that
// hold its buffers may outlive every static destructor). Safe across fork():
// a child may free what it inherited and take buffers of its own.
BufferCache& tf_buffer_cache();

}  // namespace pytfcomm
