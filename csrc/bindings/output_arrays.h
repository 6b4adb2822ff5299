// NumPy arrays for the results of collectives called without `out=`, taken
// from the process's output-buffer cache (local/buffer_cache.h) instead of
// NumPy's allocator (see output_arrays.cc).
#pragma once

#include <cstddef>

#include <pybind11/pybind11.h>

namespace pytfcomm {

// Results of this size or more come from the output cache (pytfcomm/communicator.py's
// _CACHED_OUTPUT_BYTES says the same for the results it allocates).
constexpr size_t kCachedOutputBytes = size_t{1} << 20;

// Registers _core.cached_empty(shape, dtype) and _core.output_cache_stats().
void bind_output_arrays(pybind11::module_& m);

}  // namespace pytfcomm
