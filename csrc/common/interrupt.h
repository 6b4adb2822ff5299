// Interrupting a wait (Ctrl-C). The core never handles signals itself: a
// binding installs, for the thread that is about to block, a check that says
// whether the user asked to stop (the Python bindings run the interpreter's
// signal handlers there). Waits that can block for long call
// poll_interrupt(), which runs the check at most every few tens of
// milliseconds and throws Error(kInterrupted) when it says so.
#pragma once

namespace pytfcomm {

// Returns true when the wait must stop. Called from the waiting thread.
using InterruptCheck = bool (*)();

// Installs `check` for the calling thread until the scope ends.
class InterruptScope {
 public:
  explicit InterruptScope(InterruptCheck check);
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

 private:
  InterruptCheck previous_;
};

// Throws Error(kInterrupted) when the calling thread's check says so; cheap
// (a clock read) between checks.
void poll_interrupt();
// Whether the calling thread has a check installed.
bool interruptible();

}  // namespace pytfcomm
