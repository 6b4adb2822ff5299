// Monotonic time helpers shared by transports and algorithms.
#pragma once

#include <chrono>
#include <cstdint>

namespace pytfcomm {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;

inline TimePoint deadline_after(double seconds) {
  if (seconds <= 0 || seconds > 1e8) return TimePoint::max();
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Milliseconds until `deadline`, clamped to [0, cap_ms]; for poll/epoll timeouts.
inline int millis_until(TimePoint deadline, int cap_ms = 1000) {
  if (deadline == TimePoint::max()) return cap_ms;
  auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return left > cap_ms ? cap_ms : static_cast<int>(left) + 1;
}

// Seconds left until `deadline` as a collective's timeout argument: -1 for
// none, at least 1 ms otherwise (0 would mean "the default").
inline double seconds_left(TimePoint deadline) {
  if (deadline == TimePoint::max()) return -1;
  double s = std::chrono::duration<double>(deadline - Clock::now()).count();
  return s > 0.001 ? s : 0.001;
}

inline double seconds_since(TimePoint t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace pytfcomm
