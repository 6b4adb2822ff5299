// A rank's doorbell: an eventcount on a futex word in its shared segment.
// Writers ring it after they gave the owner something to do (bytes in one of
// its inbound rings, space in one of its outbound rings); the ring costs a
// fence and a load unless the owner announced that it is going to sleep, so
// the fast path never enters the kernel. The owner, after polling found
// nothing:  seq = prepare(); <poll once more>; sleep(seq, timeout).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "transport/doorbell.h"
#include "transport/shm/layout.h"
#include "transport/shm/segment.h"

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

// This rank's doorbell as the host transport sees it (transport/doorbell.h);
// keeps the segment it lives in mapped.
class SegmentDoorbell final : public transport::Doorbell {
 public:
  explicit SegmentDoorbell(std::shared_ptr<Mapping> segment)
      : segment_(std::move(segment)), bell_(segment_->header()) {}
  void ring() noexcept override { bell_.ring(); }
  uint32_t prepare() noexcept override { return bell_.prepare(); }
  void sleep(uint32_t seq, int64_t timeout_us) override { bell_.sleep(seq, timeout_us); }
  void cancel() noexcept override { bell_.cancel(); }

 private:
  std::shared_ptr<Mapping> segment_;
  shm::Doorbell bell_;  // (the base class is transport::Doorbell)
};

}  // namespace pytfcomm::shm
