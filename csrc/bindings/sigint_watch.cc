// A SIGINT handler put in front of Python's (docs/reliability.md "How Ctrl-C
// works"). A TF op's caller waits inside TensorFlow, where Python runs no
// signal handler until the op returns, and the op waits for the other ranks
// up to PYTFCOMM_TIMEOUT. When collectives submitted by TF ops are pending,
// the handler only wakes a watcher thread, which interrupts them: they fail
// with kInterrupted (tf.errors.CancelledError), the peers are told and the
// communicator closes, as when Ctrl-C stops a NumPy call. Otherwise, or when
// they finished meanwhile, Python's handler gets the signal as if nothing
// stood in front of it (KeyboardInterrupt). Python replaces this handler
// whenever the program installs its own with signal.signal().
#include "bindings/sigint_watch.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <thread>

#include "engine/user_interrupt.h"

namespace pytfcomm {
namespace {

struct sigaction g_previous {};
int g_wake[2] = {-1, -1};
pid_t g_pid = 0;  // a forked child has no watcher thread: it passes signals on

void pass_on(int sig, siginfo_t* info, void* uctx) {
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction != nullptr) g_previous.sa_sigaction(sig, info, uctx);
    return;
  }
  if (g_previous.sa_handler == SIG_IGN) return;
  if (g_previous.sa_handler == SIG_DFL) {
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  g_previous.sa_handler(sig);
}

void on_sigint(int sig, siginfo_t* info, void* uctx) {
  const int saved = errno;
  char byte = 1;
  if (::getpid() != g_pid || unattended_waits() == 0 || ::write(g_wake[1], &byte, 1) != 1) {
    pass_on(sig, info, uctx);
  }
  errno = saved;
}

void watch() {
  char buf[64];
  for (;;) {
    ssize_t n = ::read(g_wake[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    // Finished between the signal and now: the signal is Python's after all.
    if (interrupt_unattended_all() == 0) pass_on(SIGINT, nullptr, nullptr);
  }
}

// Installs the handler and starts the watcher, once per process (a forked
// child of a process that installed it gets a pipe and a watcher of its own;
// the handler is already in place). False when there was nothing to do or
// the system refused.
bool install() {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (g_pid == ::getpid()) return false;
  const bool in_place = g_pid != 0;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return false;
  ::fcntl(fds[1], F_SETFL, ::fcntl(fds[1], F_GETFL) | O_NONBLOCK);
  if (in_place) {  // the parent's pipe: its watcher is not ours
    ::close(g_wake[0]);
    ::close(g_wake[1]);
  }
  g_wake[0] = fds[0];
  g_wake[1] = fds[1];
  std::thread(watch).detach();
  if (!in_place) {
    struct sigaction sa {};
    sa.sa_sigaction = &on_sigint;
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (::sigaction(SIGINT, &sa, &g_previous) != 0) return false;
  }
  g_pid = ::getpid();
  return true;
}

}  // namespace

void bind_sigint_watch(pybind11::module_& m) {
  m.def(
      "watch_sigint", [] { return install(); },
      "Put pytfcomm's SIGINT handler in front of Python's, once per process: Ctrl-C then "
      "stops collectives that TF ops wait for (docs/reliability.md). True when installed now.");
  m.def("unattended_waits", &unattended_waits,
        "How many collectives submitted by TF ops are pending in this process.");
}

}  // namespace pytfcomm
