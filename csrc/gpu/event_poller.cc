#include "gpu/event_poller.h"

#include <condition_variable>
#include <list>
#include <mutex>
#include <thread>

#include "common/clock.h"

namespace pytfcomm::gpu {
namespace {

class Poller {
 public:
  Poller() {
    // Detached and never destroyed, like the executors: TF may still hold
    // kernels (and so watches) during static destruction.
    std::thread([this] { loop(); }).detach();
  }

  void add(std::function<bool()> poll) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      incoming_.push_back(std::move(poll));
    }
    cv_.notify_one();
  }

 private:
  void loop() {
    std::list<std::function<bool()>> active;  // only this thread touches it
    TimePoint progress = Clock::now();
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (active.empty()) cv_.wait(lock, [this] { return !incoming_.empty(); });
        if (!incoming_.empty()) progress = Clock::now();
        active.splice(active.end(), incoming_);
      }
      for (auto it = active.begin(); it != active.end();) {
        if ((*it)()) {
          it = active.erase(it);
          progress = Clock::now();
        } else {
          ++it;
        }
      }
      if (active.empty()) continue;
      // Collectives usually finish within microseconds of each other: spin
      // for 100 us after the last progress, tick every 20 us up to 10 ms,
      // then every 200 us (a member that never arrives must not cost a core).
      auto idle = Clock::now() - progress;
      if (idle < std::chrono::microseconds(100)) {
        std::this_thread::yield();
      } else if (idle < std::chrono::milliseconds(10)) {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::list<std::function<bool()>> incoming_;
};

}  // namespace

void watch(std::function<bool()> poll) {
  static Poller* poller = new Poller();
  poller->add(std::move(poll));
}

}  // namespace pytfcomm::gpu
