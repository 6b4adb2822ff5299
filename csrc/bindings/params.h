// Registers the parameter registry in pytfcomm._core (see params.cc).
#pragma once

#include <pybind11/pybind11.h>

namespace pytfcomm {
void bind_params(pybind11::module_& m);
}
