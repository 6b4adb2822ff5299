// pytfcomm::Error -> pytfcomm.errors classes in pytfcomm._core (errors.cc).
#pragma once

#include <pybind11/pybind11.h>

namespace pytfcomm {

// Registers the exception translator (by PTC_ERROR_KINDS) and error_table(),
// the same table for tests/project/test_error_table.py to compare with docs/errors.md.
void bind_errors(pybind11::module_& m);

}  // namespace pytfcomm
