#include "engine/fusion_queue.h"

#include <algorithm>
#include <vector>

#include "common/error.h"
#include "common/logging.h"
#include "common/param.h"

namespace pytfcomm {
namespace {
// Shape tag of the agreement collective, so that a rank whose user issues
// an ordinary collective while its peers agree fails with a mismatch.
constexpr uint32_t kAgreeTag = 0x46555345;  // "FUSE"
}  // namespace

bool AsyncRequest::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

bool AsyncRequest::wait(double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  // Under mu_: finish() clears on_wait_ before the queue can go away.
  if (!done_ && on_wait_) on_wait_();
  if (timeout_s < 0) {
    cv_.wait(lock, [this] { return done_; });
  } else {
    auto limit = std::chrono::duration<double>(timeout_s);
    if (!cv_.wait_for(lock, limit, [this] { return done_; })) return false;
  }
  if (error_) std::rethrow_exception(error_);
  return true;
}

void AsyncRequest::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    error_ = std::move(error);
    on_wait_ = nullptr;
  }
  cv_.notify_all();
}

FusionQueue::FusionQueue(Fusion& fusion, Communicator& comm) : fusion_(fusion), comm_(comm) {
  thread_ = std::thread([this] { loop(); });
}

FusionQueue::~FusionQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::shared_ptr<AsyncRequest> FusionQueue::submit(const FusionRequest& req, ReduceOp op,
                                                  Algorithm algorithm, double timeout_s,
                                                  uint32_t tag) {
  auto h = std::make_shared<AsyncRequest>();
  h->on_wait_ = [this] { flush(); };
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) PTC_THROW(kClosed, "this communicator is closing; create a new one");
    queue_.push_back({req, op, algorithm, timeout_s, tag, h, std::chrono::steady_clock::now()});
    queued_bytes_ += req.count * dtype_size(req.dtype);
  }
  cv_.notify_all();
  return h;
}

void FusionQueue::flush() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    flush_ = true;
  }
  cv_.notify_all();
}

namespace {

bool is_mismatch(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return e.kind() == ErrorKind::kMismatch;
  } catch (...) {
    return false;
  }
}

}  // namespace

size_t FusionQueue::agree(size_t local, double timeout_s) {
  int64_t k = static_cast<int64_t>(local);
  comm_.allreduce(&k, &k, 1, DType::kInt64, ReduceOp::kMin, Algorithm::kAuto, timeout_s, kAgreeTag);
  PTC_ENFORCE(k >= 1 && static_cast<size_t>(k) <= local, "agreed count ", k, " of ", local);
  return static_cast<size_t>(k);
}

// Consecutive entries with the same op, algorithm and timeout form one
// allreduce_many; the runs are the same on every rank that submitted alike.
void FusionQueue::reduce(std::deque<Entry>& batch) {
  size_t begin = 0;
  while (begin < batch.size()) {
    const Entry& first = batch[begin];
    size_t end = begin;
    std::vector<FusionRequest> reqs;
    uint32_t tag = 0;
    while (end < batch.size() && batch[end].op == first.op &&
           batch[end].algorithm == first.algorithm && batch[end].timeout_s == first.timeout_s) {
      reqs.push_back(batch[end].req);
      tag = tag * 31u + batch[end].tag;
      ++end;
    }
    fusion_.allreduce_many(reqs, first.op, first.algorithm, first.timeout_s, tag);
    for (size_t i = begin; i < end; ++i) batch[i].handle->finish(nullptr);
    begin = end;
  }
}

void FusionQueue::loop() {
  const auto cycle = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double, std::milli>(params().fusion_cycle_ms));
  const size_t threshold = static_cast<size_t>(params().fusion_bytes);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (stop_) break;
    cv_.wait_until(lock, queue_.front().submitted + cycle,
                   [&] { return stop_ || flush_ || queued_bytes_ >= threshold; });
    if (stop_) break;
    flush_ = false;
    const size_t local = queue_.size();
    const double timeout_s = queue_.front().timeout_s;
    std::deque<Entry> batch;
    lock.unlock();
    std::exception_ptr error;
    try {
      const size_t k = agree(local, timeout_s);
      lock.lock();
      for (size_t i = 0; i < k; ++i) {
        queued_bytes_ -= queue_.front().req.count * dtype_size(queue_.front().req.dtype);
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      lock.unlock();
      reduce(batch);
    } catch (...) {
      error = std::current_exception();
    }
    if (error && !batch.empty() && is_mismatch(error) && !comm_.closed()) {
      // Ranks disagreed on the batch every rank agreed to take (the same k
      // requests everywhere): every rank fails exactly those, and what is
      // still queued stays in step for the next cycle (Horovod's contract:
      // a mismatch leaves the communicator usable).
      for (Entry& e : batch) {
        if (!e.handle->done()) e.handle->finish(error);
      }
    } else if (error) {
      // A failed collective closed the communicator: nothing queued can run.
      if (!lock.owns_lock()) lock.lock();
      while (!queue_.empty()) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      queued_bytes_ = 0;
      lock.unlock();
      for (Entry& e : batch) {
        if (!e.handle->done()) e.handle->finish(error);
      }
    }
    lock.lock();
  }
  // Stopping: what never ran fails, so no waiter hangs.
  std::deque<Entry> left;
  left.swap(queue_);
  lock.unlock();
  if (left.empty()) return;
  auto closed = std::make_exception_ptr(
      Error(ErrorKind::kClosed, "the communicator was closed before this all-reduce ran"));
  for (Entry& e : left) e.handle->finish(closed);
}

}  // namespace pytfcomm
