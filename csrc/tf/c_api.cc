// A tiny C interface of the op library for Python's ctypes: which TF it was
// compiled against, whether it has GPU kernels, and the engine's counters
// (proof that pytfcomm did the work, used by tests and `python -m pytfcomm
// info`).
#include <cstdint>

#include "local/buffer_cache.h"
#include "local/local_reduce.h"
#include "tf_config.h"

extern "C" {

__attribute__((visibility("default"))) const char* pytfcomm_tf_compiled_version() {
  return PYTFCOMM_TF_VERSION;
}

__attribute__((visibility("default"))) int pytfcomm_tf_gpu_kernels() {
  return PYTFCOMM_TF_GPU_KERNELS;
}

// Indices past the engine's counters read the output-buffer cache
// (local/buffer_cache.h): hits, misses, idle bytes. -1 for unknown indices.
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
