// Progress and waiting of the HostTransport (transport.h): poll briefly,
// then block in epoll_wait or on the doorbell; deadlines, the stall
// inspector's turn, and the negotiation's view of lost peers.
#include <sched.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/error.h"
#include "common/interrupt.h"
#include "transport/host/transport.h"

namespace pytfcomm::host {
namespace {

// A short pause between polls that keeps the core (and is kind to an SMT sibling).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  for (int i = 0; i < 16; ++i) __builtin_ia32_pause();
#endif
}

}  // namespace

void HostTransport::set_deadline(TimePoint deadline) {
  deadline_ = deadline;
  timeout_s_ = 0;
  if (deadline != TimePoint::max()) {
    timeout_s_ = std::chrono::duration<double>(deadline - Clock::now()).count();
  }
  extra_s_ = 0;
}

void HostTransport::check_deadline() {
  TimePoint now = Clock::now();
  if (now < deadline_) return;
  // The stall inspector asked every rank shortly before; it knows who did
  // not answer, which a rank that waits on another waiting rank cannot see.
  transport::StallVerdict v;
  if (observer_) {
    // A peer that sent this rank data it has no receive for yet (a partner
    // one step ahead in a pairwise exchange) is inside the collective, and
    // its status answer waits behind that data: the data frame answers for
    // it. Without this it would count as silent, get no last words, and
    // take the closed connection for a lost peer.
    for (int p = 0; p < size(); ++p) {
      transport::MessageMeta m;
      if (pairs_[p] && pairs_[p]->data_waiting(&m)) {
        observer_->on_status(p, m, transport::kStatusInCollective);
      }
    }
    v = observer_->on_deadline(now);
  }
  if (v.wait_until > now) {
    extra_s_ = std::chrono::duration<double>(v.wait_until - deadline_).count();
    deadline_ = v.wait_until;
    return;
  }
  std::vector<int> waited = pending_peers();
  std::string waiting;
  for (int peer : waited) waiting += str_cat(waiting.empty() ? "" : ", ", describe_peer(peer));
  // A hung rank would not read our last words: give it none (abort() then
  // does not wait for it). With a verdict, that is a rank that did not
  // answer the last status query. One that answered reads its frames: it
  // is stuck in an older collective, or idle because news of this round
  // reaches it only through the hung rank (rounds over frames forward
  // records, rounds.cc). Without the ABORT it would report this rank as
  // lost. Without a verdict (the ranks were not asked), suspect those we
  // wait on.
  for (int peer : v.asked ? v.silent : waited) {
    if (peer >= 0 && peer < size() && pairs_[peer]) pairs_[peer]->mark_gone();
  }
  auto round = [](double x) { return static_cast<int64_t>(x * 100 + 0.5) / 100.0; };
  std::string extra =
      extra_s_ > 0 ? str_cat(" (and ", round(extra_s_), " s more: the ranks it waits on wait too)")
                   : "";
  PTC_THROW(kTimeout, "timed out after ", round(timeout_s_), " s", extra, " in ", context_,
            " waiting for ", waiting.empty() ? "peers" : waiting,
            v.text.empty() ? ": that rank is hung, stopped or far behind" : "; " + v.text,
            " (PYTFCOMM_TIMEOUT sets the deadline)");
}

// Socket readiness and liveness: a closed socket marks a shared-memory peer
// gone; an idle pair may hold an ABORT frame.
void HostTransport::handle_events(int timeout_ms) {
  epoll_event events[16];
  int n = ::epoll_wait(epoll_fd_, events, 16, timeout_ms);
  if (n < 0 && errno != EINTR) PTC_THROW(kInternal, "epoll_wait failed: ", std::strerror(errno));
  for (int i = 0; i < n; ++i) {
    if (events[i].data.u32 == kWakeTag) {
      uint64_t v;
      while (::read(wake_fd_, &v, sizeof(v)) > 0) {
      }
      continue;
    }
    Pair& p = *pairs_[static_cast<int>(events[i].data.u32)];
    bool readable = events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR);
    if (p.polled() && readable) p.on_liveness_event();
    // Edge-triggered: a pair without receives must look now (sends pending
    // or not), or a status or ABORT frame would wait for the next edge.
    if (readable) p.check_idle(context_);
  }
}

void HostTransport::block_once(const std::function<bool()>& pred, TimePoint wake_by) {
  check_deadline();
  TimePoint now = Clock::now();
  liveness_tick(now);
  poll_interrupt();
  // The stall inspector runs only here, after polling found nothing: never
  // on the path of a collective that makes progress.
  TimePoint wake = std::min(deadline_, wake_by);
  if (beat_s_ > 0) wake = std::min(wake, next_beat_);
  // Interrupt checks need a turn now and then even when nothing happens.
  if (interruptible()) wake = std::min(wake, now + std::chrono::milliseconds(50));
  if (observer_) {
    wake = std::min(wake, observer_->on_block(now));
    // Push out the status frames it may have queued: no readiness event
    // would wake us for a socket that was writable all along.
    if (progress_all()) return;
  }
  // Records in the areas arrive by the doorbell.
  bool shm_pending = area_bytes_ > 0, tcp_pending = false;
  for (int peer : active_) {
    Pair& p = *pairs_[peer];
    (p.polled() ? shm_pending : tcp_pending) = true;
    p.read_ahead(context_);
  }
  if (!shm_pending) {
    sleeping_.store(kInEpoll, std::memory_order_seq_cst);
    if (!woken_.exchange(false)) handle_events(millis_until(wake, 1000));
    sleeping_.store(kAwake, std::memory_order_relaxed);
    check_round_peers();
    return;
  }
  handle_events(0);
  uint32_t seq = bell_->prepare();
  sleeping_.store(kOnDoorbell, std::memory_order_seq_cst);
  // The last poll after prepare(): a publish or a wake() that raced with
  // the checks above must not leave us asleep until the timeout.
  if (woken_.exchange(false) || progress_all() || pred()) {
    bell_->cancel();
    sleeping_.store(kAwake, std::memory_order_relaxed);
    return;
  }
  // Sleep until a local peer rings; wake up now and then to look at the
  // sockets (a dead peer rings nobody) and, with TCP pending too, often.
  int64_t us = tcp_pending ? 200 : 10000;
  if (wake != TimePoint::max()) {
    auto left = std::chrono::duration_cast<std::chrono::microseconds>(wake - Clock::now());
    us = std::max<int64_t>(1, std::min<int64_t>(us, left.count()));
  }
  bell_->sleep(seq, us);
  sleeping_.store(kAwake, std::memory_order_relaxed);
  handle_events(0);
  // An abort note or a status frame rings the doorbell too (check_idle
  // reads only pairs without receives; progress reads the others).
  for (auto& p : pairs_) {
    if (p && p->polled()) p->check_idle(context_);
  }
  check_round_peers();
}

void HostTransport::check_round_peers() {
  // Negotiating: a peer that is gone will never publish again. In a round,
  // the peers whose record has not come; between rounds, every peer (this
  // rank waits for them to ask for its collectives). Over frames, in a
  // round, only the peers this rank hears from: a rank farther away may
  // have finished the round and left before its record, forwarded by
  // others, got here; one that is lost instead is seen by the rank it
  // sends to, whose abort reaches every rank.
  if (!negotiating_) return;
  for (int r = 0; r < size(); ++r) {
    if (r == rank_ || !pairs_[r] || !pairs_[r]->idle_for_records()) continue;
    pairs_[r]->check_idle(context_);  // its record (or ABORT) may be here by now
    if (published_ && (has_record(r) || !hears_from(r))) continue;
    pairs_[r]->check_alive(context_);
  }
}

template <typename Pred>
void HostTransport::wait_until(Pred pred, TimePoint wake_by) {
  if (aborted_) PTC_THROW(kClosed, "the transport was shut down after an earlier error");
  try {
    wait_loop(pred, wake_by);
  } catch (const PeerLastWords&) {
    // A peer that gave up after it finished this step (it went on to a
    // later collective) left its last words behind what it sent for this
    // one; shared memory shows them at once, and a socket read can take
    // both. What it sent still counts: a wait it satisfies completes here
    // as on every other rank, and the next wait that needs the peer hears
    // the words again (the pair keeps them).
    if (!done_before_last_words([&] { return pred(); })) throw;
  }
}

bool HostTransport::done_before_last_words(const std::function<bool()>& pred) {
  // Each pass can end in the words of another peer; at most one per peer.
  for (int i = 0; i < size(); ++i) {
    try {
      progress_all();
      return pred();
    } catch (const PeerLastWords&) {
    }
  }
  return false;
}

template <typename Pred>
void HostTransport::wait_loop(Pred& pred, TimePoint wake_by) {
  progress_all();
  if (pred()) return;
  if (wait_.spin_us > 0) {
    TimePoint spin_end = Clock::now() + std::chrono::microseconds(wait_.spin_us);
    do {
      if (wait_.yield_cpu) {
        sched_yield();
      } else {
        cpu_relax();
      }
      progress_all();
      if (pred()) return;
    } while (Clock::now() < spin_end);
  }
  const std::function<bool()> check = [&] { return pred(); };
  for (;;) {
    block_once(check, wake_by);
    progress_all();
    if (pred() || Clock::now() >= wake_by) return;
  }
}

void HostTransport::wait(transport::Handle h) {
  wait_until([&] { return done(h); });
}

bool HostTransport::test(transport::Handle h) {
  if (done(h)) return true;
  try {
    progress_all();
  } catch (const PeerLastWords&) {
    if (!done_before_last_words([&] { return done(h); })) throw;  // as in wait_until
  }
  return done(h);
}

void HostTransport::wait_data(const std::function<bool()>& pred) {
  wait_until([&] { return pred(); });
}

void HostTransport::wait_all() {
  wait_until([&] { return active_.empty(); });
}

void HostTransport::wait_for(const std::function<bool()>& pred, TimePoint wake_by) {
  // Only negotiation waits come here (collectives wait on handles).
  struct Flag {
    bool& f;
    explicit Flag(bool& x) : f(x) { f = true; }
    ~Flag() { f = false; }
  } negotiating(negotiating_);
  wait_until([&] { return pred(); }, wake_by);
}

void HostTransport::wake() noexcept {
  woken_.store(true, std::memory_order_seq_cst);
  switch (sleeping_.load(std::memory_order_seq_cst)) {
    case kInEpoll: {
      uint64_t one = 1;
      (void)!::write(wake_fd_, &one, sizeof(one));
      break;
    }
    case kOnDoorbell:
      bell_->ring();
      break;
    default:
      break;
  }
}

}  // namespace pytfcomm::host
