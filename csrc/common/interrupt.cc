#include "common/interrupt.h"

#include "common/clock.h"
#include "common/error.h"

namespace pytfcomm {
namespace {

// Often enough that Ctrl-C acts within a blink, rarely enough that the
// check (which may take the Python GIL) costs nothing measurable.
constexpr auto kInterval = std::chrono::milliseconds(50);

thread_local InterruptCheck t_check = nullptr;
thread_local TimePoint t_next{};

}  // namespace

InterruptScope::InterruptScope(InterruptCheck check) : previous_(t_check) { t_check = check; }

InterruptScope::~InterruptScope() { t_check = previous_; }

bool interruptible() { return t_check != nullptr; }

void poll_interrupt() {
  if (t_check == nullptr) return;
  TimePoint now = Clock::now();
  if (now < t_next) return;
  t_next = now + kInterval;
  if (t_check()) PTC_THROW(kInterrupted, "interrupted by the user (a signal such as Ctrl-C)");
}

}  // namespace pytfcomm
