// Where a communicator keeps its timeline (observe/timeline.h): null until
// one is started, then set once, so that hooks on any thread test it and use
// it without a lock (`if (timeline_) timeline_->...`).
#pragma once

#include <atomic>
#include <memory>

namespace pytfcomm {

class Timeline;  // observe/timeline.h

class TimelineSlot {
 public:
  explicit operator bool() const { return get() != nullptr; }
  Timeline* operator->() const { return get(); }
  Timeline* get() const { return ptr_.load(std::memory_order_acquire); }
  // Only while null (start/stop are serialised by the communicator). Both
  // are defined in communicator.cc, which sees the whole Timeline.
  void set(std::unique_ptr<Timeline> t);
  // Gives up the timeline without destroying it (a forked child's).
  Timeline* release();

 private:
  std::unique_ptr<Timeline> owned_;
  std::atomic<Timeline*> ptr_{nullptr};
};

}  // namespace pytfcomm
