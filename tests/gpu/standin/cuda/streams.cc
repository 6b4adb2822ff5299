// Streams and events of the CUDA driver stand-in (see driver.cc).
//
// A stream is a queue of work items run in order by the stream's own thread,
// so enqueueing returns at once and completion is asynchronous. Item k of a
// stream has sequence number k (1-based); `completed` is the last one run.
// An event records a (stream, sequence) point; cuStreamWaitEvent enqueues an
// item that waits until that point has been reached. An item that returns
// an error makes it the stream's sticky error: later items are dropped
// (their completion is still counted, so waiters do not hang), and queries,
// synchronisation and events at or after that point report it.
//
// As in CUDA, the legacy default stream (handle 0 / CU_STREAM_LEGACY) and
// the streams created without CU_STREAM_NON_BLOCKING synchronise with each
// other: an item on one waits for what was enqueued on the others before it.
// CU_STREAM_PER_THREAD is treated as the legacy stream.
#include <chrono>
#include <condition_variable>
#include <deque>
#include <thread>
#include <unordered_map>

#include "cuda/internal.h"

namespace ptcsi {

struct Dep {
  std::shared_ptr<Stream> s;
  uint64_t seq;
};

struct Item {
  uint64_t seq = 0;
  std::vector<Dep> deps;  // points of other streams to wait for first
  Work fn;                // null: only a wait or a marker
  bool delay = false;
};

struct Stream {
  Context* ctx = nullptr;
  bool legacy = false;
  bool blocking = false;  // synchronises with the legacy stream
  std::mutex mu;
  std::condition_variable work_cv;  // new item or closing
  std::condition_variable done_cv;  // `completed` moved
  std::deque<Item> queue;
  uint64_t enqueued = 0;
  uint64_t completed = 0;
  CUresult error = CUDA_SUCCESS;
  uint64_t error_seq = 0;
  bool closing = false;  // destroyed: drain, then the thread ends
};

namespace {

struct Event {
  Context* ctx = nullptr;
  std::mutex mu;
  std::shared_ptr<Stream> s;  // null until recorded
  uint64_t seq = 0;
};

struct Handles {
  std::mutex mu;
  std::unordered_map<CUstream, std::shared_ptr<Stream>> streams;
  std::unordered_map<CUevent, std::shared_ptr<Event>> events;
};

Handles& handles() {
  static auto* h = new Handles();
  return *h;
}

bool is_legacy_handle(CUstream h) {
  return h == nullptr || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD;
}

void run(const std::shared_ptr<Stream>& s) {
  for (;;) {
    Item it;
    {
      std::unique_lock<std::mutex> lock(s->mu);
      s->work_cv.wait(lock, [&] { return !s->queue.empty() || s->closing; });
      if (s->queue.empty()) return;
      it = std::move(s->queue.front());
      s->queue.pop_front();
    }
    for (const Dep& d : it.deps) {
      std::unique_lock<std::mutex> lock(d.s->mu);
      d.s->done_cv.wait(lock, [&] { return d.s->completed >= d.seq; });
    }
    bool failed = false;
    {
      std::lock_guard<std::mutex> lock(s->mu);
      failed = s->error != CUDA_SUCCESS;
    }
    CUresult r = CUDA_SUCCESS;
    if (!failed && it.fn) {
      if (it.delay && delay_us() > 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(delay_us()));
      }
      try {
        r = it.fn();
      } catch (...) {
        r = CUDA_ERROR_UNKNOWN;
      }
    }
    it.fn = nullptr;  // release what the work owns before it counts as done
    {
      std::lock_guard<std::mutex> lock(s->mu);
      s->completed = it.seq;
      if (r != CUDA_SUCCESS && s->error == CUDA_SUCCESS) {
        s->error = r;
        s->error_seq = it.seq;
      }
    }
    s->done_cv.notify_all();
  }
}

CUresult start(const std::shared_ptr<Stream>& s) {
  try {
    std::thread([s] { run(s); }).detach();
  } catch (...) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return CUDA_SUCCESS;
}

// Appends an item; returns its sequence number.
uint64_t push(const std::shared_ptr<Stream>& s, Work fn, bool delay, std::vector<Dep> deps = {}) {
  if (s->legacy || s->blocking) {
    std::lock_guard<std::mutex> lock(mutex());
    auto point = [&](const std::shared_ptr<Stream>& o) {
      std::lock_guard<std::mutex> l(o->mu);
      if (o->enqueued > o->completed) deps.push_back({o, o->enqueued});
    };
    if (s->legacy) {
      for (const auto& w : s->ctx->streams) {
        if (auto o = w.lock(); o && o->blocking) point(o);
      }
    } else if (s->ctx->legacy) {
      point(s->ctx->legacy);
    }
  }
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    Item it;
    it.seq = seq = ++s->enqueued;
    it.deps = std::move(deps);
    it.fn = std::move(fn);
    it.delay = delay;
    s->queue.push_back(std::move(it));
  }
  s->work_cv.notify_one();
  return seq;
}

CUresult find_event(CUevent h, std::shared_ptr<Event>* out) {
  if (CUresult r = need_init()) return r;
  Handles& hs = handles();
  std::lock_guard<std::mutex> lock(hs.mu);
  auto it = hs.events.find(h);
  if (it == hs.events.end()) return CUDA_ERROR_INVALID_HANDLE;
  *out = it->second;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult resolve_stream(CUstream h, std::shared_ptr<Stream>* out) {
  if (CUresult r = need_init()) return r;
  if (is_legacy_handle(h)) {
    Context* c = nullptr;
    if (CUresult r = need_current(&c)) return r;
    std::lock_guard<std::mutex> lock(mutex());
    if (!c->legacy) {
      auto s = std::make_shared<Stream>();
      s->ctx = c;
      s->legacy = true;
      if (CUresult r = start(s)) return r;
      c->legacy = s;
    }
    *out = c->legacy;
    return CUDA_SUCCESS;
  }
  {
    Handles& hs = handles();
    std::lock_guard<std::mutex> lock(hs.mu);
    auto it = hs.streams.find(h);
    if (it == hs.streams.end()) return CUDA_ERROR_INVALID_HANDLE;
    *out = it->second;
  }
  return active((*out)->ctx) ? CUDA_SUCCESS : CUDA_ERROR_CONTEXT_IS_DESTROYED;
}

Context* stream_context(const Stream& s) { return s.ctx; }
const void* stream_id(const Stream& s) { return &s; }

void enqueue(const std::shared_ptr<Stream>& s, Work fn, bool delay) {
  push(s, std::move(fn), delay);
}

CUresult synchronize(const std::shared_ptr<Stream>& s) {
  std::unique_lock<std::mutex> lock(s->mu);
  const uint64_t target = s->enqueued;
  s->done_cv.wait(lock, [&] { return s->completed >= target; });
  return s->error;
}

CUresult synchronize_context(Context* c) {
  std::vector<std::shared_ptr<Stream>> all;
  {
    std::lock_guard<std::mutex> lock(mutex());
    if (c->legacy) all.push_back(c->legacy);
    for (const auto& w : c->streams) {
      if (auto s = w.lock()) all.push_back(s);
    }
  }
  CUresult first = CUDA_SUCCESS;
  for (const auto& s : all) {
    CUresult r = synchronize(s);
    if (first == CUDA_SUCCESS) first = r;
  }
  return first;
}

}  // namespace ptcsi

using namespace ptcsi;

PTCSI_API CUresult cuStreamCreate(CUstream* ph, unsigned int flags) {
  Context* c = nullptr;
  if (CUresult r = need_current(&c)) return r;
  if (ph == nullptr || (flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto s = std::make_shared<Stream>();
  s->ctx = c;
  s->blocking = (flags & CU_STREAM_NON_BLOCKING) == 0;
  if (CUresult r = start(s)) return r;
  {
    std::lock_guard<std::mutex> lock(mutex());
    auto& v = c->streams;
    for (size_t i = 0; i < v.size();) {  // forget destroyed streams
      if (v[i].expired()) {
        v[i] = v.back();
        v.pop_back();
      } else {
        ++i;
      }
    }
    v.push_back(s);
  }
  auto h = reinterpret_cast<CUstream>(s.get());
  {
    Handles& hs = handles();
    std::lock_guard<std::mutex> lock(hs.mu);
    hs.streams[h] = s;
  }
  *ph = h;
  return CUDA_SUCCESS;
}

// Returns at once, as CUDA does: the stream's thread finishes the work
// already enqueued, then the stream is freed (events recorded on it stay
// valid).
PTCSI_API CUresult cuStreamDestroy_v2(CUstream h) {
  if (CUresult r = need_init()) return r;
  if (is_legacy_handle(h)) return CUDA_ERROR_INVALID_HANDLE;
  std::shared_ptr<Stream> s;
  {
    Handles& hs = handles();
    std::lock_guard<std::mutex> lock(hs.mu);
    auto it = hs.streams.find(h);
    if (it == hs.streams.end()) return CUDA_ERROR_INVALID_HANDLE;
    s = std::move(it->second);
    hs.streams.erase(it);
  }
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->closing = true;
  }
  s->work_cv.notify_one();
  return CUDA_SUCCESS;
}

PTCSI_API CUresult cuStreamQuery(CUstream h) {
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(h, &s)) return r;
  std::lock_guard<std::mutex> lock(s->mu);
  if (s->error != CUDA_SUCCESS) return s->error;
  return s->completed < s->enqueued ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

PTCSI_API CUresult cuStreamSynchronize(CUstream h) {
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(h, &s)) return r;
  return synchronize(s);
}

PTCSI_API CUresult cuStreamGetCtx(CUstream h, CUcontext* pctx) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(h, &s)) return r;
  *pctx = reinterpret_cast<CUcontext>(s->ctx);
  return CUDA_SUCCESS;
}

PTCSI_API CUresult cuStreamWaitEvent(CUstream h, CUevent event, unsigned int flags) {
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(h, &s)) return r;
  std::shared_ptr<Event> e;
  if (CUresult r = find_event(event, &e)) return r;
  if (flags != CU_EVENT_WAIT_DEFAULT && flags != CU_EVENT_WAIT_EXTERNAL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Dep d;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    if (!e->s) return CUDA_SUCCESS;  // never recorded: nothing to wait for
    d = {e->s, e->seq};
  }
  push(s, nullptr, false, {std::move(d)});
  return CUDA_SUCCESS;
}

PTCSI_API CUresult cuEventCreate(CUevent* ph, unsigned int flags) {
  Context* c = nullptr;
  if (CUresult r = need_current(&c)) return r;
  const unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (ph == nullptr || (flags & ~known) != 0) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto e = std::make_shared<Event>();
  e->ctx = c;
  auto h = reinterpret_cast<CUevent>(e.get());
  Handles& hs = handles();
  std::lock_guard<std::mutex> lock(hs.mu);
  hs.events[h] = std::move(e);
  *ph = h;
  return CUDA_SUCCESS;
}

PTCSI_API CUresult cuEventDestroy_v2(CUevent h) {
  if (CUresult r = need_init()) return r;
  Handles& hs = handles();
  std::lock_guard<std::mutex> lock(hs.mu);
  return hs.events.erase(h) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

PTCSI_API CUresult cuEventRecord(CUevent event, CUstream h) {
  std::shared_ptr<Event> e;
  if (CUresult r = find_event(event, &e)) return r;
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(h, &s)) return r;
  if (s->ctx != e->ctx) return CUDA_ERROR_INVALID_HANDLE;  // other contexts' streams
  // A marker item, so that the point includes the implicit legacy-stream
  // synchronisation.
  uint64_t seq = push(s, nullptr, false);
  std::lock_guard<std::mutex> lock(e->mu);
  e->s = std::move(s);
  e->seq = seq;
  return CUDA_SUCCESS;
}

PTCSI_API CUresult cuEventQuery(CUevent event) {
  std::shared_ptr<Event> e;
  if (CUresult r = find_event(event, &e)) return r;
  std::shared_ptr<Stream> s;
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    s = e->s;
    seq = e->seq;
  }
  if (!s) return CUDA_SUCCESS;  // never recorded
  std::lock_guard<std::mutex> lock(s->mu);
  if (s->completed < seq) return CUDA_ERROR_NOT_READY;
  if (s->error != CUDA_SUCCESS && s->error_seq <= seq) return s->error;
  return CUDA_SUCCESS;
}

extern "C" CUresult ptcsi_stream_enqueue(CUstream stream, ptcsi_work_fn fn, void* arg,
                                         void (*release)(void* arg)) {
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(stream, &s)) return r;
  struct Owned {
    void* arg;
    void (*release)(void*);
    ~Owned() {
      if (release) release(arg);
    }
  };
  std::shared_ptr<Owned> owned(new Owned{arg, release});
  push(
      s, [fn, owned] { return fn(owned->arg); }, true);
  return CUDA_SUCCESS;
}
