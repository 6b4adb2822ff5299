// The all-reduce fast path: NumPy arrays in and out, checked and dispatched
// in C++ without a Python frame's worth of attribute lookups per call.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>

#include "engine/communicator.h"

namespace pytfcomm {

void bind_fast_allreduce(pybind11::module_& m,
                         pybind11::class_<Communicator, std::shared_ptr<Communicator>>& cls);

}  // namespace pytfcomm
