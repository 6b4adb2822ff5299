// Queueing requests for the driver, and numbering them per stream
// (engine/request_queue.h).
#include "engine/request_queue.h"

#include <charconv>

#include "common/error.h"
#include "engine/engine_config.h"
#include "engine/thread_stream.h"
#include "engine/timeline_slot.h"
#include "observe/timeline.h"

namespace pytfcomm {

namespace {

void append_decimal(std::string& s, uint64_t v) {
  char buf[24];
  s.append(buf, std::to_chars(buf, buf + sizeof(buf), v).ptr);
}

// Replaces the call number in `label` ("allreduce #12 of MainThread",
// "op:train_step#3 #12"): the last "#<old>" not followed by a digit.
void renumber_label(std::string* label, uint64_t old, uint64_t now) {
  const std::string from = "#" + std::to_string(old);
  size_t at = label->rfind(from);
  while (at != std::string::npos) {
    const size_t end = at + from.size();
    if (end == label->size() || (*label)[end] < '0' || (*label)[end] > '9') {
      label->replace(at, from.size(), "#" + std::to_string(now));
      return;
    }
    if (at == 0) return;
    at = label->rfind(from, at - 1);
  }
}

}  // namespace

RequestQueue::RequestQueue(const EngineConfig& cfg,
                           const std::unique_ptr<transport::Transport>& transport,
                           const TimelineSlot& timeline)
    : cfg_(cfg), transport_(transport), timeline_(timeline) {}

void RequestQueue::check_process() const {
  if (cfg_.forked(std::memory_order_relaxed)) {
    PTC_THROW(kClosed,
              "this communicator belongs to the process that created it, not to this forked "
              "child (its connections and shared memory are the parent's): call "
              "pytfcomm.init() in the child for a job of its own");
  }
}

void RequestQueue::check_usable_locked() const {
  check_process();
  if (!closed_) return;
  if (!failure_.empty()) {
    // The calls that were waiting got the root cause's class; later ones are
    // told the communicator is closed, and why.
    PTC_THROW(kClosed, "this communicator was closed after an earlier error: ", failure_,
              " -- create a new one with pytfcomm.init()");
  }
  PTC_THROW(kClosed, "this communicator is closed; create a new one with pytfcomm.init()");
}

void RequestQueue::check_usable() const {
  std::lock_guard<std::mutex> lock(mu_);
  check_usable_locked();
}

void RequestQueue::enqueue_locked(Request* r, uint64_t stream, bool owned, StreamState* st) {
  check_usable_locked();
  if (!st) st = &streams_[stream];
  r->key.stream = stream;
  r->key.seq = st->next++;
  r->submitted = Clock::now();
  r->deadline = deadline_after(r->timeout_s);
  if (timeline_) r->submit_ns = Timeline::now_ns();
  submitted_.push_back(r);
  has_submitted_.store(true, std::memory_order_release);
  if (owned) {  // only submit_async's (TF ops'): engine/user_interrupt.h
    async_pending_.fetch_add(1);
    note_unattended(1);
  }
}

StreamState* RequestQueue::enqueue_calls(Request* const* rs, size_t n, uint64_t stream,
                                         const std::string* name, const std::string& thread) {
  std::lock_guard<std::mutex> lock(mu_);
  check_usable_locked();               // before a closed communicator keeps a stream
  StreamState& st = streams_[stream];  // node-based: stays put
  const std::thread::id me = std::this_thread::get_id();
  if (st.active > 0 && st.user != me) {
    // Two threads calling in one stream at once (two threads of one name,
    // or one name= from two threads) share one numbering: which of them is
    // the n-th call depends on timing, so their calls could pair with
    // either thread's calls on the other ranks. Horovod refuses a name
    // already in flight likewise.
    if (name) {
      PTC_THROW(kInvalidArgument, "two threads call collectives named '", *name,
                "' on this communicator at once; calls of one name are matched across ranks "
                "by name and call count, so which thread's call pairs with which on the "
                "other ranks would depend on timing: give each thread's calls their own name");
    }
    PTC_THROW(kInvalidArgument, "two threads named '", thread,
              "' call collectives on this communicator at once; collectives are matched "
              "across ranks by thread name and call count, so give each thread its own "
              "name (threading.Thread(name=...)), or pass name= to the calls");
  }
  for (size_t i = 0; i < n; ++i) {
    Request& r = *rs[i];
    enqueue_locked(&r, stream, false, &st);
    // "allreduce #12 of MainThread" (no ostringstream: this is per call).
    r.label.assign(algorithms::kind_name(r.desc.kind));
    if (name) r.label.append(" '").append(*name).append("'");
    r.label.append(" #");
    append_decimal(r.label, r.key.seq);
    if (!name) r.label.append(" of ").append(thread);
  }
  st.user = me;
  ++st.active;
  return &st;
}

bool RequestQueue::enqueue_async(std::vector<std::unique_ptr<Request>>& reqs, uint64_t stream,
                                 const std::string& label, bool drive) {
  std::lock_guard<std::mutex> lock(mu_);
  check_usable_locked();
  StreamState& st = streams_[stream];
  if (st.unattended > 0) {
    // A TF op's executions run one after another (each finishes before
    // the next starts), every loop iteration in a stream of its own. One
    // still waiting here means two at once, e.g. one tf.function called
    // from two threads: which of them is the n-th would depend on timing.
    PTC_THROW(kInvalidArgument, "'", label,
              "' started while another execution of it still waits for its collectives (the "
              "same tf.function or graph run from two threads at once?); executions of an op "
              "are matched across workers by their count, so which would pair with which "
              "would depend on timing: give each thread its own tf.function");
  }
  st.unattended += static_cast<int>(reqs.size());
  for (auto& req : reqs) {
    Request* r = req.get();
    enqueue_locked(r, stream, true, &st);
    r->label = label;
    r->label.append(" #");
    append_decimal(r->label, r->key.seq);
    owned_submitted_.push_back(std::move(req));
  }
  if (!drive || driving_ || sync_waiters_.load() != 0) return false;
  driving_ = true;
  return true;
}

void RequestQueue::wake_driver() {
  bg_cv_.notify_one();  // the background thread drives when nobody else does
  if (transport_) transport_->wake();
}

size_t RequestQueue::stream_states() const {
  std::lock_guard<std::mutex> lock(mu_);
  return streams_.size();
}

bool RequestQueue::closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

std::string RequestQueue::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

bool RequestQueue::begin_close() {
  std::unique_lock<std::mutex> lock(mu_);
  if (closed_ && !transport_) return false;
  closed_ = true;
  // Wait for a driving thread to leave the transport (it sees closing_ and
  // returns); the caller then fails what is left and releases the transport.
  closing_.store(true);
  if (transport_ && driving_) transport_->wake();
  ++waiters_;
  cv_.wait(lock, [this] { return !driving_; });
  --waiters_;
  driving_ = true;  // nobody drives a closed communicator again
  return true;
}

std::vector<Request*> RequestQueue::take_queued() {
  std::vector<Request*> queued;
  std::lock_guard<std::mutex> lock(mu_);
  queued.swap(submitted_);
  return queued;
}

void RequestQueue::end_close() {
  std::lock_guard<std::mutex> lock(mu_);
  stop_ = true;  // nothing left for the background thread: let it go now
  // Streams still in use by a waiting caller go when it leaves (await).
  for (auto it = streams_.begin(); it != streams_.end();) {
    it = it->second.active == 0 && it->second.unattended == 0 ? streams_.erase(it) : std::next(it);
  }
  cv_.notify_all();
  bg_cv_.notify_all();
}

void RequestQueue::take(std::vector<Request*>* fresh, OwnedRequests* owned) {
  std::lock_guard<std::mutex> lock(mu_);
  has_submitted_.store(false, std::memory_order_relaxed);
  fresh->insert(fresh->end(), submitted_.begin(), submitted_.end());
  submitted_.clear();
  for (auto& req : owned_submitted_) {
    Request* r = req.get();
    owned->emplace(r, std::move(req));
  }
  owned_submitted_.clear();
}

void RequestQueue::set_failed(const std::string& why, ErrorKind kind) {
  std::lock_guard<std::mutex> lock(mu_);
  if (failure_.empty()) {
    failure_ = why;
    failure_kind_ = kind;
  }
  closed_ = true;
}

void RequestQueue::restart_stream(uint64_t stream, uint64_t next,
                                  const std::vector<Request*>& taken) {
  auto renumber = [&](Request* r) {
    if (r->key.stream != stream) return;
    renumber_label(&r->label, r->key.seq, next);
    r->key.seq = next++;
  };
  std::lock_guard<std::mutex> lock(mu_);
  for (Request* r : taken) renumber(r);
  for (Request* r : submitted_) renumber(r);
  streams_[stream].next = next;
}

void RequestQueue::adopt(const CollectiveKey& key, bool agreed) {
  // The others called this the seq-th collective of its stream: so did we,
  // for numbering, or this rank's later calls would pair with the wrong ones.
  // A named stream the others' agreed call restarted restarts here too.
  std::lock_guard<std::mutex> lock(mu_);
  StreamState& st = streams_[key.stream];
  if (st.next <= key.seq) st.next = key.seq + 1;
  if (is_named_stream(key.stream) && agreed) release_stream_locked(key.stream);
}

}  // namespace pytfcomm
