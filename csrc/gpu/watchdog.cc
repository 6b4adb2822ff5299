#include "gpu/watchdog.h"

#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>

namespace pytfcomm::gpu {
namespace {

class Watchdog {
 public:
  static Watchdog& get() {
    static auto* w = new Watchdog();  // never destroyed: its thread outlives exit paths
    return *w;
  }

  uint64_t arm(TimePoint when, std::function<void()> fire, Clock::duration every) {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t id = ++next_;
    const bool earliest = alarms_.empty() || when < alarms_.begin()->first.first;
    alarms_.emplace(std::make_pair(when, id), Alarm{std::move(fire), every});
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    if (earliest) cv_.notify_all();
    return id;
  }

  void disarm(uint64_t id) {
    std::unique_lock<std::mutex> lock(mu_);
    // A running one may re-arm itself (`every`): wait, then take it out.
    done_cv_.wait(lock, [&] { return running_ != id; });
    for (auto it = alarms_.begin(); it != alarms_.end(); ++it) {
      if (it->first.second == id) {
        alarms_.erase(it);
        break;
      }
    }
    fired_.erase(id);
  }

  bool fired(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    return fired_.count(id) != 0;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      if (alarms_.empty()) {
        cv_.wait(lock);
        continue;
      }
      auto it = alarms_.begin();
      if (Clock::now() < it->first.first) {
        cv_.wait_until(lock, it->first.first);
        continue;
      }
      const uint64_t id = it->first.second;
      Alarm alarm = std::move(it->second);
      alarms_.erase(it);
      running_ = id;
      fired_.insert(id);
      lock.unlock();
      alarm.fire();
      lock.lock();
      if (alarm.every > Clock::duration::zero()) {
        alarms_.emplace(std::make_pair(Clock::now() + alarm.every, id), std::move(alarm));
      }
      running_ = 0;
      done_cv_.notify_all();
    }
  }

  struct Alarm {
    std::function<void()> fire;
    Clock::duration every;  // zero: once
  };

  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::map<std::pair<TimePoint, uint64_t>, Alarm> alarms_;
  std::set<uint64_t> fired_;  // ids that fired and were not disarmed yet
  uint64_t next_ = 0;
  uint64_t running_ = 0;
  std::thread thread_;
};

}  // namespace

WatchdogAlarm::WatchdogAlarm(TimePoint when, std::function<void()> fire, Clock::duration every)
    : id_(Watchdog::get().arm(when, std::move(fire), every)) {}

WatchdogAlarm::~WatchdogAlarm() { Watchdog::get().disarm(id_); }

bool WatchdogAlarm::fired() const { return Watchdog::get().fired(id_); }

}  // namespace pytfcomm::gpu
