#include "memory_transport.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/error.h"
#include "common/interrupt.h"
#include "transport/wire_check.h"

namespace pytfcomm::testing_util {
namespace {

// How often a blocked wait looks again at what no notification covers (an
// interrupt check, the stall observer).
constexpr auto kTick = std::chrono::milliseconds(50);

}  // namespace

MemoryWorld::MemoryWorld(int size, MemoryOptions options)
    : size_(size),
      options_(options),
      channels_(static_cast<size_t>(size * size)),
      ranks_(static_cast<size_t>(size)) {}

void MemoryWorld::match(int from, int to) {
  Channel& c = channel(from, to);
  while (!c.broken && !c.sends.empty() && !c.recvs.empty()) {
    Op* s = c.sends.front();
    Op* r = c.recvs.front();
    const wire::FrameVerdict v =
        wire::check_frame(s->header, r->header.meta, r->nbytes, options_.max_message);
    if (v != wire::FrameVerdict::kOk) {
      // The receiver's stream is unusable from here on, as a real one would be.
      c.broken = true;
      Rank& rr = ranks_[static_cast<size_t>(to)];
      if (rr.failure.empty()) {
        rr.failure_kind = ErrorKind::kMismatch;
        rr.failure = v == wire::FrameVerdict::kTooLarge
                         ? str_cat("rank ", from, " announced a ", s->nbytes,
                                   "-byte message, over the limit of ", options_.max_message)
                         : str_cat("ranks disagree: rank ", from, " sent ",
                                   wire::describe_meta(s->header.meta, s->nbytes),
                                   " but this rank expected ",
                                   wire::describe_meta(r->header.meta, r->nbytes));
      }
      return;
    }
    if (r->nbytes > 0) std::memcpy(r->data, s->data, r->nbytes);
    s->done = r->done = true;
    c.sends.pop_front();
    c.recvs.pop_front();
  }
}

void MemoryWorld::take_back(int rank) {
  for (int p = 0; p < size_; ++p) {
    auto& out = channel(rank, p).sends;
    out.erase(std::remove_if(out.begin(), out.end(), [](const auto* op) { return !op->done; }),
              out.end());
    channel(p, rank).recvs.clear();
  }
  changed();
}

MemoryTransport::MemoryTransport(std::shared_ptr<MemoryWorld> world, int rank)
    : world_(std::move(world)), rank_(rank) {
  PTC_ENFORCE(rank_ >= 0 && rank_ < world_->size(), "bad rank ", rank_);
}

// Leaving, like aborting, takes back every buffer of this rank that peers
// could still read or write: the caller may free them now.
MemoryTransport::~MemoryTransport() {
  MemoryWorld& w = *world_;
  std::lock_guard<std::mutex> lock(w.mu_);
  w.ranks_[static_cast<size_t>(rank_)].gone = true;
  w.take_back(rank_);
}

int MemoryTransport::size() const { return world_->size(); }

void MemoryTransport::check_open() const {
  if (world_->ranks_[static_cast<size_t>(rank_)].aborted) {
    PTC_THROW(kClosed, "the transport was shut down after an earlier error");
  }
}

transport::Handle MemoryTransport::post_send(int peer, const void* data, size_t nbytes,
                                             const transport::MessageMeta& meta) {
  return post(false, peer, static_cast<char*>(const_cast<void*>(data)), nbytes, meta);
}

transport::Handle MemoryTransport::post_recv(int peer, void* data, size_t nbytes,
                                             const transport::MessageMeta& meta) {
  return post(true, peer, static_cast<char*>(data), nbytes, meta);
}

transport::Handle MemoryTransport::post(bool recv, int peer, char* data, size_t nbytes,
                                        const transport::MessageMeta& meta) {
  MemoryWorld& w = *world_;
  std::lock_guard<std::mutex> lock(w.mu_);
  check_open();
  PTC_ENFORCE(peer >= 0 && peer < w.size_ && peer != rank_, "bad peer ", peer);
  auto& ops = w.ranks_[static_cast<size_t>(rank_)].ops;
  MemoryWorld::Op& op = ops.emplace_back();
  op.recv = recv;
  op.peer = peer;
  op.data = data;
  op.nbytes = nbytes;
  op.header.magic = wire::kDataMagic;
  op.header.nbytes = nbytes;
  op.header.meta = meta;
  const int from = recv ? peer : rank_, to = recv ? rank_ : peer;
  if (recv) {
    w.channel(from, to).recvs.push_back(&op);
  } else {
    if (nbytes <= w.options_.buffered_bytes) {
      op.copy.assign(data, data + nbytes);
      op.data = op.copy.data();
      op.done = true;
    }
    w.channel(from, to).sends.push_back(&op);
  }
  w.match(from, to);
  w.changed();
  return ops.size() - 1;
}

void MemoryTransport::check_locked(std::unique_lock<std::mutex>& lock) {
  try {
    throw_failure_locked(lock);
  } catch (...) {
    // The caller unwinds and frees the buffers of what it posted: no peer
    // may copy into or out of them any more.
    world_->take_back(rank_);
    throw;
  }
}

void MemoryTransport::throw_failure_locked(std::unique_lock<std::mutex>& lock) {
  MemoryWorld& w = *world_;
  MemoryWorld::Rank& me = w.ranks_[static_cast<size_t>(rank_)];
  deliver_statuses(lock);
  if (!me.failure.empty()) throw Error(me.failure_kind, str_cat(me.failure, " during ", context_));
  std::vector<int> pending;
  for (const auto& op : me.ops) {
    if (!op.done) pending.push_back(op.peer);
  }
  for (int p = 0; p < w.size_; ++p) {
    const MemoryWorld::Rank& peer = w.ranks_[static_cast<size_t>(p)];
    const std::string name = describe_peer(p);
    if (peer.aborted) {
      if (peer.abort_kind == ErrorKind::kMismatch) {
        PTC_THROW(kMismatch, name, " gave up on a mismatch while this rank was in ", context_, ": ",
                  peer.last_words);
      }
      if (peer.abort_kind == ErrorKind::kTimeout) {
        PTC_THROW(kTimeout, name, " gave up at its deadline while this rank was in ", context_,
                  ": ", peer.last_words);
      }
      PTC_THROW(kPeerLost, name, " aborted while this rank was in ", context_, ": ",
                peer.last_words);
    }
    const bool needed = std::find(pending.begin(), pending.end(), p) != pending.end() ||
                        (published_ && peer.published < round_);
    if (peer.gone && needed) {
      PTC_THROW(kPeerLost, "lost ", name, " during ", context_, ": the connection was closed");
    }
  }
  const TimePoint now = Clock::now();
  if (now < deadline_) return;
  transport::StallVerdict v;
  if (observer_) {
    lock.unlock();
    v = observer_->on_deadline(now);
    lock.lock();
  }
  if (v.wait_until > now) {
    deadline_ = v.wait_until;
    return;
  }
  std::string waiting;
  for (int p : pending) waiting += str_cat(waiting.empty() ? "" : ", ", describe_peer(p));
  PTC_THROW(kTimeout, "timed out after ", seconds_since(set_at_), " s in ", context_,
            " waiting for ", waiting.empty() ? "peers" : waiting,
            v.text.empty() ? "" : "; " + v.text);
}

void MemoryTransport::wait_until(const std::function<bool()>& done, TimePoint wake_by) {
  MemoryWorld& w = *world_;
  MemoryWorld::Rank& me = w.ranks_[static_cast<size_t>(rank_)];
  for (;;) {
    uint64_t generation;
    {
      std::lock_guard<std::mutex> lock(w.mu_);
      check_open();
      generation = w.generation_;
    }
    if (done()) return;
    poll_interrupt();
    std::unique_lock<std::mutex> lock(w.mu_);
    check_locked(lock);
    TimePoint now = Clock::now();
    if (now >= wake_by) return;
    TimePoint until = std::min({wake_by, deadline_, now + kTick});
    if (observer_) {
      lock.unlock();
      until = std::min(until, observer_->on_block(now));
      lock.lock();
    }
    w.cv_.wait_until(lock, until, [&] { return w.generation_ != generation || me.woken; });
    me.woken = false;
  }
}

void MemoryTransport::wait(transport::Handle h) {
  MemoryWorld& w = *world_;
  const auto& ops = w.ranks_[static_cast<size_t>(rank_)].ops;
  wait_until(
      [&] {
        std::lock_guard<std::mutex> lock(w.mu_);
        return ops[static_cast<size_t>(h)].done;
      },
      TimePoint::max());
}

bool MemoryTransport::test(transport::Handle h) {
  MemoryWorld& w = *world_;
  std::unique_lock<std::mutex> lock(w.mu_);
  check_open();
  if (w.ranks_[static_cast<size_t>(rank_)].ops[static_cast<size_t>(h)].done) return true;
  check_locked(lock);
  return false;
}

void MemoryTransport::wait_all() {
  MemoryWorld& w = *world_;
  const auto& ops = w.ranks_[static_cast<size_t>(rank_)].ops;
  wait_until(
      [&] {
        std::lock_guard<std::mutex> lock(w.mu_);
        return std::all_of(ops.begin(), ops.end(), [](const auto& op) { return op.done; });
      },
      TimePoint::max());
}

void MemoryTransport::set_deadline(TimePoint deadline) {
  deadline_ = deadline;
  set_at_ = Clock::now();
}

void MemoryTransport::abort(const std::string& reason, ErrorKind why) noexcept {
  MemoryWorld& w = *world_;
  std::lock_guard<std::mutex> lock(w.mu_);
  MemoryWorld::Rank& me = w.ranks_[static_cast<size_t>(rank_)];
  if (me.aborted) return;
  me.aborted = true;
  me.abort_kind = why;
  me.last_words = str_cat("rank ", rank_, " gave up: ", reason);
  w.take_back(rank_);
}

std::string MemoryTransport::describe_peer(int peer) const {
  return str_cat("rank ", peer, " (in memory)");
}

bool MemoryTransport::send_status(int peer, const transport::MessageMeta& meta,
                                  uint32_t flags) noexcept {
  MemoryWorld& w = *world_;
  std::lock_guard<std::mutex> lock(w.mu_);
  if (peer < 0 || peer >= w.size_ || peer == rank_) return false;
  MemoryWorld::Rank& them = w.ranks_[static_cast<size_t>(peer)];
  if (w.ranks_[static_cast<size_t>(rank_)].aborted || them.gone || them.aborted) return false;
  them.statuses.push_back({rank_, meta, flags});
  w.changed();
  return true;
}

std::vector<int> MemoryTransport::pending_peers() const {
  MemoryWorld& w = *world_;
  std::lock_guard<std::mutex> lock(w.mu_);
  std::vector<int> out;
  for (const auto& op : w.ranks_[static_cast<size_t>(rank_)].ops) {
    if (!op.done && std::find(out.begin(), out.end(), op.peer) == out.end()) {
      out.push_back(op.peer);
    }
  }
  return out;
}

size_t MemoryTransport::round_capacity() const { return world_->options_.round_bytes; }

void MemoryTransport::round_arm(uint64_t round) {
  std::lock_guard<std::mutex> lock(world_->mu_);
  check_open();
  round_ = round;
  published_ = false;
}

char* MemoryTransport::round_outbox() {
  MemoryWorld& w = *world_;
  std::lock_guard<std::mutex> lock(w.mu_);
  auto& buf = w.ranks_[static_cast<size_t>(rank_)].records[round_ & 1];
  if (buf.empty()) buf.resize(w.options_.round_bytes);  // never again: readers keep pointers
  return buf.data();
}

void MemoryTransport::round_publish(size_t bytes) {
  MemoryWorld& w = *world_;
  std::lock_guard<std::mutex> lock(w.mu_);
  check_open();
  PTC_ENFORCE(!published_ && bytes <= w.options_.round_bytes, "round record of ", bytes, " bytes");
  MemoryWorld::Rank& me = w.ranks_[static_cast<size_t>(rank_)];
  me.record_bytes[round_ & 1] = bytes;
  me.published = round_;
  published_ = true;
  w.changed();
}

bool MemoryTransport::round_started() {
  MemoryWorld& w = *world_;
  std::lock_guard<std::mutex> lock(w.mu_);
  for (int p = 0; p < w.size_; ++p) {
    if (p != rank_ && w.ranks_[static_cast<size_t>(p)].published >= round_) return true;
  }
  return false;
}

bool MemoryTransport::round_complete() {
  MemoryWorld& w = *world_;
  std::lock_guard<std::mutex> lock(w.mu_);
  if (!published_) return false;
  for (int p = 0; p < w.size_; ++p) {
    if (w.ranks_[static_cast<size_t>(p)].published < round_) return false;
  }
  return true;
}

const char* MemoryTransport::round_record(int rank, size_t* bytes) {
  MemoryWorld& w = *world_;
  std::lock_guard<std::mutex> lock(w.mu_);
  const MemoryWorld::Rank& r = w.ranks_[static_cast<size_t>(rank)];
  PTC_ENFORCE(r.published >= round_ && !r.records[round_ & 1].empty(), "no record of round ",
              round_, " from rank ", rank);
  *bytes = r.record_bytes[round_ & 1];
  return r.records[round_ & 1].data();
}

void MemoryTransport::wait_for(const std::function<bool()>& pred, TimePoint wake_by) {
  wait_until(pred, wake_by);
}

void MemoryTransport::wake() noexcept {
  MemoryWorld& w = *world_;
  std::lock_guard<std::mutex> lock(w.mu_);
  w.ranks_[static_cast<size_t>(rank_)].woken = true;
  w.changed();
}

void MemoryTransport::deliver_statuses(std::unique_lock<std::mutex>& lock) {
  // They reach the observer from this (the waiting) thread; it may answer
  // them, so without the lock.
  auto& pending = world_->ranks_[static_cast<size_t>(rank_)].statuses;
  if (!observer_ || pending.empty()) return;
  std::vector<MemoryWorld::Status> seen;
  seen.swap(pending);
  lock.unlock();
  for (const auto& st : seen) observer_->on_status(st.from, st.meta, st.flags);
  lock.lock();
}

void MemoryTransport::keep_alive() {
  std::unique_lock<std::mutex> lock(world_->mu_);
  check_open();
  deliver_statuses(lock);
}

std::vector<std::string> run_in_memory(int n, const std::function<void(transport::Transport&)>& fn,
                                       MemoryOptions options, std::vector<ErrorKind>* kinds) {
  auto world = std::make_shared<MemoryWorld>(n, options);
  std::vector<std::string> errors(static_cast<size_t>(n));
  if (kinds) kinds->assign(static_cast<size_t>(n), ErrorKind::kInternal);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      MemoryTransport t(world, r);
      try {
        fn(t);
      } catch (const Error& e) {
        errors[static_cast<size_t>(r)] = e.what();
        if (kinds) (*kinds)[static_cast<size_t>(r)] = e.kind();
        t.abort(e.what(), e.kind());
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
        t.abort(e.what(), ErrorKind::kInternal);
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace pytfcomm::testing_util
