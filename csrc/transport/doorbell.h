// What wakes a rank that sleeps while it waits for peers on its host: its
// doorbell (shm/ implements it as a futex word in the rank's shared segment;
// connect.cc hands it to the host transport). The owner, after polling found
// nothing:  seq = prepare(); <poll once more>; sleep(seq, timeout) or cancel().
#pragma once

#include <cstdint>

namespace pytfcomm::transport {

class Doorbell {
 public:
  virtual ~Doorbell() = default;
  // Wakes the owner if it sleeps (anyone may ring); never throws.
  virtual void ring() noexcept = 0;
  // Owner side. A ring between prepare() and sleep() makes sleep() return at once.
  virtual uint32_t prepare() noexcept = 0;
  // Blocks until rung or `timeout_us` passed (or a signal); never longer.
  virtual void sleep(uint32_t seq, int64_t timeout_us) = 0;
  virtual void cancel() noexcept = 0;
};

}  // namespace pytfcomm::transport
