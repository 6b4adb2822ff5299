// Ctrl-C while TF ops wait for their collectives (engine/user_interrupt.h):
// pytfcomm._core.watch_sigint().
#pragma once

#include <pybind11/pybind11.h>

namespace pytfcomm {

void bind_sigint_watch(pybind11::module_& m);

}  // namespace pytfcomm
