// The core's code tables in pytfcomm._core (codes.cc), and the check every
// binding applies to a code that comes from Python as an int.
#pragma once

#include <pybind11/pybind11.h>

#include "common/code_table.h"
#include "common/error.h"

namespace pytfcomm {

// `value` as a `Code`; an InvalidArgument error for a value no row has.
template <typename Code>
Code code_arg(int value, const char* what) {
  PTC_CHECK_ARG(value >= 0 && valid_code<Code>(static_cast<uint64_t>(value)), "bad ", what,
                " code ", value, " (one of: ", code_names<Code>(), ")");
  return static_cast<Code>(value);
}

// DType, ReduceOp and Algorithm as pybind11 enums (the names of the C++
// tables, the same values), and the shape digests Python must compute as
// the core does.
void bind_codes(pybind11::module_& m);

}  // namespace pytfcomm
