// Who drives the engine (docs/negotiation.md). A synchronous caller drives
// while its own request is pending and no other thread drives; otherwise it
// sleeps until its request is done or the driver role is free. The
// background thread drives while asynchronous requests are pending and no
// caller wants the role (it hands it over at once when one does), and,
// while nobody drives at all, keeps the liveness heartbeats going.
#include "common/error.h"
#include "common/interrupt.h"
#include "common/logging.h"
#include "engine/driver.h"
#include "engine/engine_config.h"
#include "engine/request_queue.h"
#include "engine/thread_stream.h"

namespace pytfcomm {

void RequestQueue::await(Request* const* rs, size_t n, StreamState* stream, Driver& driver) {
  // Requests complete in order of their decisions, not necessarily in ours.
  auto all_done = [rs, n] {
    for (size_t i = 0; i < n; ++i) {
      if (!rs[i]->done()) return false;
    }
    return true;
  };
  std::unique_lock<std::mutex> lock(mu_);
  struct Release {  // under mu_ (held whenever the loop is left)
    RequestQueue* q;
    Request* const* rs;
    size_t n;
    StreamState* s;
    ~Release() {
      if (s) q->leave_stream_locked(rs, n, s);
    }
  } release{this, rs, n, stream};
  while (!all_done()) {
    if (!driving_) {
      driving_ = true;
      lock.unlock();
      driver.drive(all_done);
      lock.lock();
      release_driver_locked();
      continue;
    }
    // Another thread drives (it may well run this very request): ask the
    // background thread to hand over, and wait a little.
    sync_waiters_.fetch_add(1);
    ++waiters_;
    if (transport_) transport_->wake();
    cv_.wait_for(lock, std::chrono::milliseconds(50));
    --waiters_;
    sync_waiters_.fetch_sub(1);
    if (all_done() || !interruptible()) continue;
    lock.unlock();
    try {
      poll_interrupt();
    } catch (const Error&) {
      // The driver holds this request: have it fail everything, this
      // thread's request with the interrupt.
      interrupt_.store(true);
      lock.lock();
      if (transport_ && driving_) transport_->wake();
      ++waiters_;
      cv_.wait(lock, all_done);
      --waiters_;
      continue;
    }
    lock.lock();
  }
}

void RequestQueue::leave_stream_locked(Request* const* rs, size_t n, StreamState* s) {
  --s->active;
  if (n == 0) return;
  bool agreed = true;
  for (size_t i = 0; i < n; ++i) agreed &= rs[i]->done() && rs[i]->agreed;
  const uint64_t stream = rs[0]->key.stream;
  if (closed_ || (agreed && is_named_stream(stream))) release_stream_locked(stream);
}

void RequestQueue::release_stream_locked(uint64_t stream) {
  auto it = streams_.find(stream);
  if (it != streams_.end() && it->second.active == 0 && it->second.unattended == 0) {
    streams_.erase(it);
  }
}

void RequestQueue::release_driver_locked() {
  driving_ = false;
  if (waiters_ > 0) cv_.notify_all();
  if (async_pending_.load() > 0) bg_cv_.notify_one();
}

void RequestQueue::release_driver() {
  std::lock_guard<std::mutex> lock(mu_);
  release_driver_locked();
}

void RequestQueue::keep_alive_locked(std::unique_lock<std::mutex>& lock, Driver& driver,
                                     const char* context) {
  driving_ = true;
  lock.unlock();
  try {
    transport_->set_context(context);
    transport_->keep_alive();
  } catch (const Error& e) {
    driver.fail(std::current_exception(), e.kind(), e.what());
  }
  lock.lock();
  release_driver_locked();
}

void RequestQueue::watch_peers(Driver& driver) {
  check_process();
  std::unique_lock<std::mutex> lock(mu_);
  // A driver of its own (a caller, the background thread) watches the peers.
  if (!closed_ && !driving_ && transport_) {
    keep_alive_locked(lock, driver, "a GPU collective outside the host rounds");
  }
  if (!closed_) return;
  if (failure_.empty()) PTC_THROW(kClosed, "this communicator was closed");
  throw Error(failure_kind_, str_cat("this communicator failed: ", failure_));
}

bool RequestQueue::interrupt_unattended() {
  if (async_pending_.load() == 0) return false;
  interrupt_signal_.store(true);
  interrupt_.store(true);
  std::lock_guard<std::mutex> lock(mu_);
  if (transport_ && driving_) transport_->wake();
  bg_cv_.notify_one();
  if (waiters_ > 0) cv_.notify_all();
  return true;
}

void RequestQueue::background_loop(Driver& driver) {
  set_thread_stream("pytfcomm:background");
  set_log_rank(cfg_.rank);
  const double beat_s = cfg_.beat_s;
  const auto beat = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(beat_s > 0 ? beat_s : 1.0));
  TimePoint next_beat = Clock::now() + beat;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (closed_) {
      bg_cv_.wait(lock, [this] { return stop_; });
      break;
    }
    if (!driving_ && async_pending_.load() > 0 && sync_waiters_.load() == 0) {
      driving_ = true;
      lock.unlock();
      driver.drive([this] {
        return async_pending_.load(std::memory_order_relaxed) == 0 ||
               sync_waiters_.load(std::memory_order_relaxed) > 0;
      });
      lock.lock();
      release_driver_locked();
      next_beat = Clock::now() + beat;
      continue;
    }
    if (beat_s > 0 && Clock::now() >= next_beat && driving_) {
      next_beat = Clock::now() + beat;  // the driver beats from its waits
      continue;
    }
    if (!driving_ && beat_s > 0 && Clock::now() >= next_beat) {
      keep_alive_locked(lock, driver, "no collective (between collectives)");
      next_beat = Clock::now() + beat;
      continue;
    }
    if (beat_s > 0) {
      bg_cv_.wait_until(lock, next_beat);
    } else {
      bg_cv_.wait(lock);
    }
  }
}

}  // namespace pytfcomm
