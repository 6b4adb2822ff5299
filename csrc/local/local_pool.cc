#include "local/local_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/param.h"

namespace pytfcomm {
namespace {

// One parallel_for: workers and the caller claim indices from `next`.
struct Job {
  explicit Job(size_t n, const std::function<void(size_t)>& f) : total(n), fn(f) {}
  const size_t total;
  const std::function<void(size_t)>& fn;  // lives on the caller's stack until done
  std::atomic<size_t> next{0};
  std::atomic<size_t> finished{0};
  std::mutex mu;
  std::condition_variable cv;

  // Claims and runs indices until none are left; true if it ran the last one.
  void drain() {
    size_t ran = 0;
    for (size_t i = next.fetch_add(1); i < total; i = next.fetch_add(1)) {
      fn(i);
      ++ran;
    }
    if (ran && finished.fetch_add(ran) + ran == total) {
      std::lock_guard<std::mutex> lock(mu);
      cv.notify_all();
    }
  }
};

class Pool {
 public:
  explicit Pool(int helpers) {
    for (int i = 0; i < helpers; ++i) threads_.emplace_back([this] { loop(); });
    // Never joined: the pool lives until the process exits (it is leaked on
    // purpose so that no destructor races TF's own shutdown).
    for (auto& t : threads_) t.detach();
  }
  int helpers() const { return static_cast<int>(threads_.size()); }

  void post(const std::shared_ptr<Job>& job, int copies) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int i = 0; i < copies; ++i) queue_.push_back(job);
    }
    if (copies == 1) {
      cv_.notify_one();
    } else {
      cv_.notify_all();
    }
  }

 private:
  void loop() {
    pthread_setname_np(pthread_self(), "ptc-combine");  // top -H, perf, tests
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return !queue_.empty(); });
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      // A job whose indices are all claimed costs one atomic add here.
      job->drain();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
};

// The CPUs this process may run on (pytfcomm-run --bind-to core, taskset, a
// cgroup): helpers beyond them would only take turns with the caller.
int usable_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(CPU_COUNT(&set), 1);
  return std::max(static_cast<int>(std::thread::hardware_concurrency()), 1);
}

int helpers_from_env() {
  int threads = static_cast<int>(read_param(ParamId::local_threads).integer);  // 0: auto
  if (threads == 0) threads = std::min(usable_cpus(), 8);
  return threads - 1;
}

Pool& pool() {
  static Pool* p = new Pool(helpers_from_env());
  return *p;
}

}  // namespace

void parallel_for(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  Pool& p = pool();
  if (n == 1 || p.helpers() == 0) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  auto job = std::make_shared<Job>(n, fn);
  p.post(job, static_cast<int>(std::min<size_t>(n - 1, p.helpers())));
  job->drain();
  // Only indices already claimed by running helpers remain: pure compute.
  std::unique_lock<std::mutex> lock(job->mu);
  job->cv.wait(lock, [&] { return job->finished.load() == n; });
}

}  // namespace pytfcomm
