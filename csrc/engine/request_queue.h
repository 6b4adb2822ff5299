// The requests callers submit, the streams that number them, and who drives
// the engine (docs/negotiation.md; the lock order: engine/communicator.h).
//
// Callers queue requests here (request_queue.cc) and wait for them
// (waiting.cc); the driver (engine/driver.h) takes them in its rounds. One
// thread at a time holds the driver role: a caller whose request is
// pending, a thread that submitted asynchronous requests (briefly), the
// background thread, or close() for good. mu_ guards all of it; the atomics
// are what the driver reads in its waits without taking mu_.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/request.h"
#include "engine/user_interrupt.h"
#include "transport/transport.h"

namespace pytfcomm {

class Driver;  // engine/driver.h
class TimelineSlot;
struct EngineConfig;

// The asynchronous requests the engine owns (submit_async's), by address.
using OwnedRequests = std::unordered_map<Request*, std::unique_ptr<Request>>;

// Calls numbered per stream; the thread using a thread stream right now.
struct StreamState {
  uint64_t next = 0;
  std::thread::id user;
  int active = 0;
  int unattended = 0;  // submit_async's requests (TF ops') not finished
};

class RequestQueue {
 public:
  // `transport` is the communicator's (null once closed).
  RequestQueue(const EngineConfig& cfg, const std::unique_ptr<transport::Transport>& transport,
               const TimelineSlot& timeline);
  RequestQueue(const RequestQueue&) = delete;
  RequestQueue& operator=(const RequestQueue&) = delete;

  // --- Callers (request_queue.cc, waiting.cc) ---
  // Throws kClosed in a forked child (lock-free: call it before any lock).
  void check_process() const;
  // Throws kClosed when the communicator cannot take a request.
  void check_usable() const;
  // Queues `rs` as the next calls of `stream`, which the calling thread then
  // uses until await() returns. `name`: the calls' name (null: the stream is
  // the thread named `thread`). Returns the stream's state for await().
  StreamState* enqueue_calls(Request* const* rs, size_t n, uint64_t stream, const std::string* name,
                             const std::string& thread);
  // submit_async's: takes `reqs` (labelled "`label` #<call>"). Returns
  // whether the calling thread drives now (it asked to, and nobody drives
  // or wants to); it then calls release_driver() when done.
  bool enqueue_async(std::vector<std::unique_ptr<Request>>& reqs, uint64_t stream,
                     const std::string& label, bool drive);
  // The background thread drives when nobody else does.
  void wake_driver();
  // Waits for every request, driving with `driver` whenever no other thread
  // drives; then releases `stream` (a thread stream in use by this call, or null).
  void await(Request* const* rs, size_t n, StreamState* stream, Driver& driver);
  void release_driver();
  // Communicator::watch_peers: what the background thread does while nobody
  // drives (heartbeats, taking in what peers sent; a lost peer fails the
  // communicator through `driver`), at once when nobody drives; then throws
  // what closed the communicator, as the class of its cause.
  void watch_peers(Driver& driver);
  // Communicator::interrupt_unattended.
  bool interrupt_unattended();
  size_t stream_states() const;
  bool closed() const;
  std::string failure() const;
  // Synchronous callers waiting for the driver role (an inline driver hands over).
  int sync_waiters() const { return sync_waiters_.load(std::memory_order_relaxed); }

  // --- close() ---
  // Closes it, waits for the driver to leave and takes the role for good;
  // false when it was closed and released already.
  bool begin_close();
  // What was queued and never taken by the driver.
  std::vector<Request*> take_queued();
  // Lets the background thread go and forgets the idle streams.
  void end_close();

  // --- The background thread (waiting.cc): drives for asynchronous
  // requests, and beats while nobody drives. ---
  void background_loop(Driver& driver);

  // --- The driver (driver.cc, out_of_step.cc, join.cc) ---
  bool has_submitted() const { return has_submitted_.load(std::memory_order_acquire); }
  bool closing() const { return closing_.load(std::memory_order_relaxed); }
  bool interrupted() const { return interrupt_.load(std::memory_order_relaxed); }
  bool interrupted_by_signal() const { return interrupt_signal_.load(); }
  const std::atomic<bool>* interrupt_flag() const { return &interrupt_; }
  // Moves what was submitted to the driver's `fresh` (the owned ones' ownership to `owned`).
  void take(std::vector<Request*>* fresh, OwnedRequests* owned);
  // Before an owned request completes: its stream may take the op's next execution.
  void unattended_done(uint64_t stream) {
    std::lock_guard<std::mutex> lock(mu_);
    --streams_[stream].unattended;
  }
  // After it completed.
  void async_done() {
    async_pending_.fetch_sub(1);
    note_unattended(-1);
  }
  // After any request completed. Under mu_: a caller that saw its request
  // pending is then either asleep (and counted in waiters_) or will see it done.
  void notify_waiters() {
    std::lock_guard<std::mutex> lock(mu_);
    if (waiters_ > 0) cv_.notify_all();
  }
  // An error of `kind` closed it: every later call says `why`.
  void set_failed(const std::string& why, ErrorKind kind);
  // Out of step (out_of_step.cc): numbers the calls of `stream` not yet
  // announced (the driver's `taken`, then those still queued) from `next`
  // in the order they were made, and the stream's next call after them.
  void restart_stream(uint64_t stream, uint64_t next, const std::vector<Request*>& taken);
  // A joined rank's part in the others' call `key` (join.cc): numbered as
  // if this rank had made it; `agreed`: a named stream restarts as theirs did.
  void adopt(const CollectiveKey& key, bool agreed);

 private:
  void check_usable_locked() const;
  // Checks it can take `r`, gives it its key and queues it for the driver.
  void enqueue_locked(Request* r, uint64_t stream, bool owned, StreamState* st);
  // Gives up the driver role and wakes who may take it.
  void release_driver_locked();
  // With mu_ held (`lock`) and nobody driving: takes the driver role, sends
  // heartbeats and takes in what peers sent (transport keep_alive, in
  // `context`; a lost peer fails the communicator through `driver`), then
  // gives the role up.
  void keep_alive_locked(std::unique_lock<std::mutex>& lock, Driver& driver, const char* context);
  // After await(): the caller of `rs` no longer uses `s`, whose state goes
  // if it is a named stream that they restarted (kNamedStreamBit: all
  // agreed, nothing else in flight) or the communicator is closed.
  void leave_stream_locked(Request* const* rs, size_t n, StreamState* s);
  // Forgets `stream`'s numbering (it starts again at 0) unless something of
  // it is in flight.
  void release_stream_locked(uint64_t stream);

  const EngineConfig& cfg_;
  const std::unique_ptr<transport::Transport>& transport_;
  const TimelineSlot& timeline_;

  mutable std::mutex mu_;
  std::condition_variable cv_;       // for callers: a request finished, or the driver left
  std::condition_variable bg_cv_;    // for the background thread: work, or the end
  int waiters_ = 0;                  // threads waiting on cv_
  std::vector<Request*> submitted_;  // not yet taken by the driver
  std::vector<std::unique_ptr<Request>> owned_submitted_;
  std::unordered_map<uint64_t, StreamState> streams_;
  bool driving_ = false;               // some thread drives
  std::atomic<int> sync_waiters_{0};   // synchronous callers waiting for the role
  std::atomic<int> async_pending_{0};  // asynchronous requests not finished
  std::atomic<bool> has_submitted_{false};
  std::atomic<bool> closing_{false};           // close() waits for the driver to leave
  std::atomic<bool> interrupt_{false};         // a waiting caller was interrupted
  std::atomic<bool> interrupt_signal_{false};  // ... or Ctrl-C came while TF ops waited
  bool closed_ = false;
  bool stop_ = false;                            // the background thread must end
  std::string failure_;                          // why the communicator was closed by an error
  ErrorKind failure_kind_ = ErrorKind::kClosed;  // and that error's kind
};

}  // namespace pytfcomm
