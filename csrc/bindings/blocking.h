// What every binding that may block does around the engine call, with the
// GIL held on entry: it names the calling thread's stream after its Python
// name (collectives are matched across ranks per thread name,
// docs/negotiation.md), and, on the main thread, lets Ctrl-C interrupt the
// wait (the interpreter's signal handlers run every few tens of
// milliseconds; the exception they raise is re-raised when the call ends).
#pragma once

#include <pybind11/pybind11.h>

#include <optional>

#include "common/interrupt.h"

namespace pytfcomm {

// Cheap after the first call on a thread (a thread-local flag).
void name_thread_stream();

// Holds the GIL released for its lifetime, with Ctrl-C checks installed
// when on the main thread.
class Blocking {
 public:
  Blocking();
  Blocking(const Blocking&) = delete;
  Blocking& operator=(const Blocking&) = delete;

 private:
  std::optional<InterruptScope> interrupts_;
  std::optional<pybind11::gil_scoped_release> release_;  // last: released first
};

// For the exception translator: restores (and forgets) the Python exception
// a signal handler raised on this thread during a wait; false if none.
bool restore_interrupt_exception();

}  // namespace pytfcomm
