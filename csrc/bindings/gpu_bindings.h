// Registers the GPU part of pytfcomm._core (see gpu_bindings.cc).
#pragma once

#include <pybind11/pybind11.h>

namespace pytfcomm {
void bind_gpu(pybind11::module_& m);
}
