// A tiny C interface of the op library for Python's ctypes: which TF it was
// compiled against, whether it has GPU kernels, and the engine's counters
// (proof that pytfcomm did the work, used by tests and `python -m pytfcomm
// info`).
#include <cstdint>

#include "engine/buffer_cache.h"
#include "engine/local_reduce.h"

// The TF version string, from tf.__version__ at build time (TF's own
// release_version.h needs macros the pip package does not define).
#ifndef PYTFCOMM_TF_VERSION
#error "PYTFCOMM_TF_VERSION must be defined by the build"
#endif

// 1 when the library was built with its GPU kernels (gpu_kernels.cc).
#ifndef PYTFCOMM_TF_GPU
#define PYTFCOMM_TF_GPU 0
#endif

extern "C" {

__attribute__((visibility("default"))) const char* pytfcomm_tf_compiled_version() {
  return PYTFCOMM_TF_VERSION;
}

__attribute__((visibility("default"))) int pytfcomm_tf_gpu_kernels() { return PYTFCOMM_TF_GPU; }

// Indices past the engine's counters read the output-buffer cache
// (engine/buffer_cache.h): hits, misses, idle bytes. -1 for unknown indices.
__attribute__((visibility("default"))) int64_t pytfcomm_tf_counter(int kind) {
  constexpr int kEngine = static_cast<int>(pytfcomm::CounterKind::kCount);
  if (kind >= 0 && kind < kEngine)
    return pytfcomm::counter(static_cast<pytfcomm::CounterKind>(kind));
  if (kind < kEngine || kind >= kEngine + 3) return -1;
  try {
    const pytfcomm::BufferCache::Stats s = pytfcomm::tf_buffer_cache().stats();
    if (kind == kEngine) return s.hits;
    if (kind == kEngine + 1) return s.misses;
    return static_cast<int64_t>(s.idle_bytes);
  } catch (...) {  // a malformed PYTFCOMM_TF_BUFFER_CACHE: the ops report it
    return -1;
  }
}

}  // extern "C"
