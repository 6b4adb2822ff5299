#include "bindings/errors.h"

#include <exception>

#include "bindings/blocking.h"
#include "common/error.h"

namespace py = pybind11;

namespace pytfcomm {
namespace {

// The classes live in pytfcomm/errors.py, so that they carry docstrings and
// inherit from the matching builtins (TimeoutError, ConnectionError, ...).
py::object python_class(ErrorKind kind) {
  return py::module_::import("pytfcomm.errors").attr(error_class(kind).python);
}

}  // namespace

void bind_errors(py::module_& m) {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      // Ctrl-C: the exception the signal handler raised (KeyboardInterrupt),
      // when it is on this thread; else the kind's class.
      if (e.kind() == ErrorKind::kInterrupted && restore_interrupt_exception()) return;
      PyErr_SetString(python_class(e.kind()).ptr(), e.what());
    }
  });
  m.def(
      "error_table",
      [] {
        py::list rows;
        for (const ErrorClass& c : kErrorClasses) {
          rows.append(py::make_tuple(c.id, c.python, c.tf_status));
        }
        return rows;
      },
      "(ErrorKind enumerator, pytfcomm.errors class, TF status) of every error kind.");
}

}  // namespace pytfcomm
