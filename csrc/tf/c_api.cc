// A tiny C interface of the op library for Python's ctypes: which TF it was
// compiled against, and the engine's counters (proof that pytfcomm did the
// work, used by tests and `python -m pytfcomm info`).
#include <cstdint>

#include "engine/local_reduce.h"

// The TF version string, from tf.__version__ at build time (TF's own
// release_version.h needs macros the pip package does not define).
#ifndef PYTFCOMM_TF_VERSION
#error "PYTFCOMM_TF_VERSION must be defined by the build"
#endif

extern "C" {

__attribute__((visibility("default"))) const char* pytfcomm_tf_compiled_version() {
  return PYTFCOMM_TF_VERSION;
}

__attribute__((visibility("default"))) int64_t pytfcomm_tf_counter(int kind) {
  if (kind < 0 || kind >= static_cast<int>(pytfcomm::CounterKind::kCount)) return -1;
  return pytfcomm::counter(static_cast<pytfcomm::CounterKind>(kind));
}

}  // extern "C"
