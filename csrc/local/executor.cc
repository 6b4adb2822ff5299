#include "local/executor.h"

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

namespace pytfcomm {
namespace {

class QueueExecutor final : public Executor {
 public:
  QueueExecutor() {
    // Detached and never destroyed: a joinable thread at static destruction
    // would terminate the process, and TF may still hold kernels then.
    std::thread([this] { loop(); }).detach();
  }

  void enqueue(std::function<void()> task) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(task));
    }
    cv_.notify_one();
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return !queue_.empty(); });
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
};

}  // namespace

Executor& Executor::for_communicator(int64_t handle) {
  static std::mutex mu;
  static auto* executors = new std::map<int64_t, QueueExecutor*>();
  std::lock_guard<std::mutex> lock(mu);
  QueueExecutor*& e = (*executors)[handle];
  if (!e) e = new QueueExecutor();
  return *e;
}

}  // namespace pytfcomm
