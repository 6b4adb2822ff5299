// A rank's doorbell: an eventcount on a futex word in its shared segment.
// Writers ring it after they gave the owner something to do (bytes in one of
// its inbound rings, space in one of its outbound rings); the ring costs a
// fence and a load unless the owner announced that it is going to sleep, so
// the fast path never enters the kernel. The owner, after polling found
// nothing:  seq = prepare(); <poll once more>; sleep(seq, timeout).
#pragma once

#include <cstdint>

#include "transport/shm/layout.h"

namespace pytfcomm::shm {

class Doorbell {
 public:
  explicit Doorbell(SegmentHeader* h = nullptr) : h_(h) {}

  // Writer side; never throws.
  void ring() noexcept;

  // Owner side. prepare() must be followed by a last poll, then sleep() or
  // cancel(): a ring between prepare() and sleep() makes sleep() return at once.
  uint32_t prepare() noexcept;
  // Blocks until rung or `timeout_us` passed (or a signal); never longer.
  void sleep(uint32_t seq, int64_t timeout_us);
  void cancel() noexcept;

 private:
  SegmentHeader* h_;
};

}  // namespace pytfcomm::shm
