// Asynchronous all-reduce with Horovod-style fusion of requests submitted
// close together.
//
// Requests wait in a FIFO. A background thread starts a cycle once the
// oldest request has waited PYTFCOMM_FUSION_CYCLE_MS, the queue holds
// PYTFCOMM_FUSION_BYTES, or someone waits on a request. Ranks may see
// different queue lengths at that moment, so each cycle first agrees on a
// count: a one-element min all-reduce of the local queue length. Every rank
// then fuses exactly the first k requests (consecutive runs with the same
// op/algorithm/timeout go through Fusion::allreduce_many), so the plans
// match as long as every rank submits the same requests in the same order;
// when they do not, the list digest makes it a MismatchError on every rank.
//
// Limits: while requests are queued, other collectives on the same
// communicator from other threads would race with the cycle's collectives;
// and a rank blocks in the agreement until every rank has submitted at
// least one request (bounded by the collective timeout).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "engine/fusion.h"

namespace pytfcomm {

// The caller's view of one queued all-reduce.
class AsyncRequest {
 public:
  bool done() const;
  // Blocks until the request finished or `timeout_s` passed (< 0: no
  // limit); returns whether it finished. Rethrows the request's error.
  bool wait(double timeout_s);

 private:
  friend class FusionQueue;
  void finish(std::exception_ptr error);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  std::function<void()> on_wait_;  // asks the queue to start a cycle now
};

class FusionQueue {
 public:
  FusionQueue(Fusion& fusion, Communicator& comm);
  ~FusionQueue();  // finishes the cycle in flight, fails what is still queued

  std::shared_ptr<AsyncRequest> submit(const FusionRequest& req, ReduceOp op, Algorithm algorithm,
                                       double timeout_s, uint32_t tag);

 private:
  struct Entry {
    FusionRequest req;
    ReduceOp op;
    Algorithm algorithm;
    double timeout_s;
    uint32_t tag;
    std::shared_ptr<AsyncRequest> handle;
    std::chrono::steady_clock::time_point submitted;
  };
  void loop();
  void flush();
  size_t agree(size_t local, double timeout_s);
  void reduce(std::deque<Entry>& batch);

  Fusion& fusion_;
  Communicator& comm_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> queue_;
  size_t queued_bytes_ = 0;
  bool flush_ = false;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace pytfcomm
