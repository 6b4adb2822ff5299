// NumPy arrays for the results of collectives called without `out=`, taken
// from the process's output-buffer cache (local/buffer_cache.h) instead of
// NumPy's allocator (see output_arrays.cc).
#pragma once

#include <pybind11/pybind11.h>

namespace pytfcomm {

// Registers _core.cached_empty(shape, dtype).
void bind_output_arrays(pybind11::module_& m);

}  // namespace pytfcomm
