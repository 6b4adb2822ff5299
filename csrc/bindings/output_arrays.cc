// _core.cached_empty: an uninitialised C-contiguous array whose memory comes
// from the output-buffer cache the TF ops use, handed back to it when the
// array is freed. NumPy (glibc) maps a buffer of 32 MiB or more afresh for
// every call and unmaps it on free, so each all-reduce into a new result
// paid a page fault per page first (2-core VM, N=2 over shared memory: 32 MiB
// 8.6-9.8 ms against 4.6-6.1 with `out=`, 64 MiB 15.4-17.1 against 9.4-12.3;
// docs/benchmarks.md).
#include "bindings/output_arrays.h"

#include <cstddef>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "common/error.h"
#include "local/buffer_cache.h"

namespace py = pybind11;

namespace pytfcomm {
namespace {

py::array cached_empty(const std::vector<py::ssize_t>& shape, const py::dtype& dt) {
  size_t bytes = static_cast<size_t>(dt.itemsize());
  for (py::ssize_t n : shape) {
    PTC_CHECK_ARG(n >= 0, "negative dimension ", n, " in the result's shape");
    PTC_CHECK_ARG(!__builtin_mul_overflow(bytes, static_cast<size_t>(n), &bytes),
                  "the result's shape is too large");
  }
  // A malformed PYTFCOMM_TF_BUFFER_CACHE raises ConfigError here.
  BufferCache& cache = tf_buffer_cache();
  void* p = bytes > 0 ? cache.take(bytes) : nullptr;
  if (p == nullptr) return py::array(dt, shape);  // NumPy's allocation (its MemoryError)
  py::capsule owner(p, [](void* q) { tf_buffer_cache().give(q); });
  return py::array(dt, shape, std::vector<py::ssize_t>{}, p, owner);
}

py::dict cache_stats() {
  const BufferCache::Stats s = tf_buffer_cache().stats();
  py::dict d;
  d["hits"] = s.hits;
  d["misses"] = s.misses;
  d["idle_bytes"] = s.idle_bytes;
  d["in_use_bytes"] = s.in_use_bytes;
  return d;
}

}  // namespace

void bind_output_arrays(py::module_& m) {
  m.def("cached_empty", &cached_empty, py::arg("shape"), py::arg("dtype"),
        "An uninitialised C-contiguous array from the output-buffer cache "
        "(PYTFCOMM_TF_BUFFER_CACHE), returned to it when freed.");
  m.def("output_cache_stats", &cache_stats,
        "This process's output-buffer cache: hits, misses, idle_bytes (kept for reuse), "
        "in_use_bytes (held by live arrays and tensors).");
}

}  // namespace pytfcomm
