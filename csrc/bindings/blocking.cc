#include "bindings/blocking.h"

#include <pybind11/pybind11.h>

#include <string>

#include "engine/thread_stream.h"

namespace py = pybind11;

namespace pytfcomm {
namespace {

thread_local bool t_named = false;
thread_local bool t_main_known = false;
thread_local bool t_is_main = false;
// The exception a signal handler raised during this thread's wait.
thread_local PyObject* t_type = nullptr;
thread_local PyObject* t_value = nullptr;
thread_local PyObject* t_trace = nullptr;

bool on_main_thread() {
  if (!t_main_known) {
    py::object threading = py::module_::import("threading");
    t_is_main = threading.attr("current_thread")().is(threading.attr("main_thread")());
    t_main_known = true;
  }
  return t_is_main;
}

// Runs the interpreter's signal handlers (main thread only: that is where
// Python delivers signals). Called with the GIL released.
bool python_signal_check() {
  PyGILState_STATE st = PyGILState_Ensure();
  bool raised = PyErr_CheckSignals() != 0;
  if (raised) {
    Py_XDECREF(t_type);
    Py_XDECREF(t_value);
    Py_XDECREF(t_trace);
    PyErr_Fetch(&t_type, &t_value, &t_trace);
  }
  PyGILState_Release(st);
  return raised;
}

}  // namespace

void name_thread_stream() {
  if (t_named) return;
  py::object t = py::module_::import("threading").attr("current_thread")();
  set_thread_stream(py::str(t.attr("name")).cast<std::string>());
  t_named = true;
}

Blocking::Blocking() {
  name_thread_stream();
  if (on_main_thread()) interrupts_.emplace(&python_signal_check);
  release_.emplace();
}

bool restore_interrupt_exception() {
  if (!t_type) return false;
  PyErr_Restore(t_type, t_value, t_trace);
  t_type = t_value = t_trace = nullptr;
  return true;
}

}  // namespace pytfcomm
