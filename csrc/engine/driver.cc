// The engine's driver (docs/negotiation.md): one thread at a time runs the
// negotiation rounds and the collectives they decide.
//
// Between rounds the driver takes the requests submitted since, gives up on
// those past their deadline (a withdrawal, announced in the next record) and
// publishes a record as soon as it has something to say or a peer has
// published the round; otherwise it waits for either. In a round it waits
// for every peer's record, then every rank makes the same decisions and runs
// the same collectives in the same order, then the next round is armed.
#include <algorithm>
#include <cstring>
#include <optional>

#include "common/error.h"
#include "common/interrupt.h"
#include "common/logging.h"
#include "common/param.h"
#include "engine/driver.h"
#include "engine/engine_config.h"
#include "engine/round_record.h"
#include "observe/stall_inspector.h"

namespace pytfcomm {

namespace {

std::exception_ptr make_error(ErrorKind kind, const std::string& msg) {
  return std::make_exception_ptr(Error(kind, msg));
}

// The interrupt flag of the communicator this thread drives, for threads
// with no interrupt check of their own (InterruptCheck takes no argument).
thread_local const std::atomic<bool>* t_interrupt_flag = nullptr;

bool interrupt_flag_set() {
  return t_interrupt_flag != nullptr && t_interrupt_flag->load(std::memory_order_relaxed);
}

// Makes `flag` the calling thread's interrupt check while it drives.
struct FlagCheck {
  explicit FlagCheck(const std::atomic<bool>* flag) : scope(&interrupt_flag_set) {
    t_interrupt_flag = flag;
  }
  ~FlagCheck() { t_interrupt_flag = nullptr; }
  InterruptScope scope;
};

}  // namespace

Driver::Driver(const EngineConfig& cfg, RequestQueue& queue, transport::Transport* transport,
               StallInspector* inspector, const TimelineSlot& timeline)
    : cfg_(cfg),
      queue_(queue),
      transport_(transport),
      inspector_(inspector),
      negotiator_(cfg.rank, cfg.size),
      executor_(cfg, transport, inspector, timeline, context_) {
  if (cfg_.size > 1) transport_->round_arm(round_);
}

void Driver::finish(Request* r, std::exception_ptr error) {
  std::unique_ptr<Request> owned;
  auto it = owned_.find(r);
  if (it != owned_.end()) {
    owned = std::move(it->second);
    owned_.erase(it);
  }
  // Before complete(): its callback may let TF start the op's next
  // execution, which must find this one gone (submit_async).
  if (owned) queue_.unattended_done(r->key.stream);
  r->complete(error);  // a synchronous owner may destroy `r` from here on
  if (owned) queue_.async_done();
  queue_.notify_waiters();
}

TimePoint Driver::earliest_deadline() const {
  TimePoint t = TimePoint::max();
  for (const auto& kv : negotiator_.mine()) t = std::min(t, kv.second->deadline);
  for (const Request* r : fresh_) t = std::min(t, r->deadline);
  return t;
}

void Driver::take_submissions() {
  if (!queue_.has_submitted()) return;
  queue_.take(&fresh_, &owned_);
}

void Driver::expire() {
  const TimePoint now = Clock::now();
  // Never announced (records were full): nobody else can have decided it.
  for (size_t i = 0; i < fresh_.size();) {
    Request* r = fresh_[i];
    if (now < r->deadline) {
      ++i;
      continue;
    }
    fresh_.erase(fresh_.begin() + static_cast<std::ptrdiff_t>(i));
    finish(r, make_error(ErrorKind::kTimeout,
                         str_cat("timed out after ", r->timeout_s, " s before '", r->label,
                                 "' could even be announced to the other ranks (this rank has ",
                                 negotiator_.mine().size(), " collectives waiting for them)")));
  }
  for (const auto& kv : negotiator_.mine()) {
    if (now >= kv.second->deadline &&
        std::find(withdraw_.begin(), withdraw_.end(), kv.first) == withdraw_.end()) {
      withdraw_.push_back(kv.first);
    }
  }
}

bool Driver::eager_input(const Request& r, size_t* data_bytes) const {
  *data_bytes = 0;
  if (r.external) return false;  // its buffers are not host memory
  const size_t bytes = r.bytes();
  const auto alg = static_cast<Algorithm>(r.desc.algorithm);
  switch (r.desc.kind) {
    case algorithms::CollectiveKind::kBarrier:
      return true;
    case algorithms::CollectiveKind::kAllreduce:
      if (alg != Algorithm::kAuto && alg != Algorithm::kOneShot) return false;
      [[fallthrough]];
    case algorithms::CollectiveKind::kAllgather:
    case algorithms::CollectiveKind::kAllgatherv:
      if (bytes > cfg_.eager_bytes) return false;
      *data_bytes = bytes;
      return true;
    case algorithms::CollectiveKind::kBroadcast:
      if (bytes > cfg_.eager_bytes) return false;
      if (r.desc.root == cfg_.rank) *data_bytes = bytes;
      return true;
    default:
      return false;
  }
}

void Driver::publish_round() {
  RecordWriter& w = writer_;
  w.reset(transport_->round_outbox(), transport_->round_capacity(), round_);
  // Withdrawals first: a key withdrawn here cannot be decided in this round.
  size_t gone = 0;
  for (; gone < withdraw_.size(); ++gone) {
    const CollectiveKey k = withdraw_[gone];
    if (!w.add_withdrawal(k)) break;
    auto it = negotiator_.mine().find(k);
    PTC_ENFORCE(it != negotiator_.mine().end(), "withdrawing a request this rank does not hold");
    Request* r = it->second;
    std::vector<int> missing = negotiator_.missing(k);
    std::string who;
    for (size_t i = 0; i < missing.size() && i < 8; ++i) who += str_cat(i ? ", " : "", missing[i]);
    if (missing.size() > 8) who += str_cat(" and ", missing.size() - 8, " more");
    std::string others = negotiator_.describe_unmatched(k);
    std::string msg =
        str_cat("timed out after ", r->timeout_s, " s waiting for the other ranks to call '",
                r->label, "', ", describe(r->desc), ": rank", missing.size() == 1 ? " " : "s ", who,
                missing.size() == 1 ? " has" : " have", " not called it",
                others.empty() ? "" : str_cat(" (what they asked for instead: ", others, ")"),
                ". Collectives are matched across ranks by key: the n-th call of each thread (by "
                "thread name), the TF op, or the name= given. This rank gave up on this call; the "
                "communicator is still usable (PYTFCOMM_TIMEOUT sets the deadline)");
    negotiator_.withdraw(k);
    finish(r, make_error(ErrorKind::kTimeout, msg));
  }
  withdraw_.erase(withdraw_.begin(), withdraw_.begin() + static_cast<std::ptrdiff_t>(gone));
  size_t taken = 0;
  // Agreed before: a slot of the agreed cache stands for it (agreed_cache.h).
  const AgreedCache* cache = params().negotiation_cache ? &negotiator_.cache() : nullptr;
  for (; taken < fresh_.size(); ++taken) {
    Request* r = fresh_[taken];
    size_t data = 0;
    const bool eager = eager_input(*r, &data);
    if (!add_announcement(w, cache, *r, eager, data)) break;
    negotiator_.announce(r);
  }
  // The steady state, one collective in the record and nothing else
  // pending: its first message may ride right behind the record
  // (engine/sent_ahead.cc).
  Request* ahead = nullptr;
  size_t data0 = 0;
  if (taken == 1 && gone == 0 && negotiator_.mine().size() == 1 &&
      !eager_input(*fresh_[0], &data0) && executor_.can_send_ahead(*fresh_[0])) {
    ahead = fresh_[0];
    w.set_sent_ahead();
  }
  fresh_.erase(fresh_.begin(), fresh_.begin() + static_cast<std::ptrdiff_t>(taken));
  transport_->round_publish(w.finish());
  if (ahead) executor_.send_ahead(*ahead, round_);
  // A request whose deadline passes while the round is open can only be
  // withdrawn after it (in the next record), and the other ranks, which
  // publish as soon as they see this record, close it within moments; only
  // a rank that publishes nothing for a while longer fails the round.
  const TimePoint earliest = earliest_deadline();
  round_deadline_ = earliest;
  const Request* oldest = nullptr;
  if (earliest != TimePoint::max()) {
    double shortest = cfg_.timeout_s;
    for (const auto& kv : negotiator_.mine()) {
      shortest = std::min(shortest, kv.second->timeout_s);
      if (kv.second->deadline == earliest) oldest = kv.second;
    }
    round_deadline_ += std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(std::clamp(0.25 * shortest, 0.2, 5.0)));
  }
  // Stall warnings and timeouts inside the round name the collective that
  // has waited longest (only when a round is published: not per call).
  context_.assign("negotiating round ").append(std::to_string(round_));
  if (oldest) {
    context_.append(" for '").append(oldest->label).append("', ").append(describe(oldest->desc));
  }
}

void Driver::step(const std::function<bool()>& done) {
  if (state_ == RoundState::kBetween) {
    take_submissions();
    expire();
    if (!fresh_.empty() || !withdraw_.empty() || transport_->round_started()) {
      publish_round();
      state_ = RoundState::kInRound;
      return;
    }
    if (done()) return;
    // Nothing to say: wait for a submission, a peer's record or a deadline.
    transport_->set_context("waiting for the other ranks' collectives");
    transport_->set_deadline(TimePoint::max());
    const TimePoint wake_by = std::min(earliest_deadline(), inline_until_);
    // This rank's collectives wait for the other ranks, which have asked for
    // others or none (every rank published the last round): the stall
    // inspector says so at its interval.
    const Request* oldest = nullptr;
    for (const auto& kv : negotiator_.mine()) {
      if (!oldest || kv.second->submitted < oldest->submitted) oldest = kv.second;
    }
    if (oldest) {
      inspector_->begin_unmatched(oldest->submitted, oldest->timeout_s,
                                  [this] { return negotiator_.describe_waits(); });
    }
    try {
      transport_->wait_for(
          [&] {
            return queue_.has_submitted() || transport_->round_started() || done() ||
                   queue_.closing() || queue_.interrupted();
          },
          wake_by);
    } catch (...) {
      inspector_->end_unmatched();
      throw;
    }
    inspector_->end_unmatched();
    return;
  }
  transport_->set_context(context_);
  transport_->set_deadline(round_deadline_);
  if (!transport_->round_complete()) {
    transport::MessageMeta meta;
    meta.seq = static_cast<uint32_t>(round_);
    meta.kind = transport::kNegotiationKind;
    const double left = round_deadline_ == TimePoint::max() ? 0 : seconds_left(round_deadline_);
    inspector_->begin(meta, context_.c_str(), 0, left, Clock::now());
    try {
      transport_->wait_for(
          [&] {
            return transport_->round_complete() || done() || queue_.closing() ||
                   queue_.interrupted();
          },
          inline_until_);
    } catch (...) {
      inspector_->end();
      throw;
    }
    inspector_->end();
    if (!transport_->round_complete()) return;
  }
  transport_->set_deadline(TimePoint::max());
  process_round();
  ++round_;
  transport_->round_arm(round_);
  state_ = RoundState::kBetween;
}

bool Driver::fast_round() {
  if (negotiator_.mine().size() != 1 || !negotiator_.tables_empty()) return false;
  Request* mine = negotiator_.mine().begin()->second;
  fast_data_.assign(static_cast<size_t>(cfg_.size), nullptr);
  bool eager = true;
  Announcement& a = fast_one_;
  for (int r = 0; r < cfg_.size; ++r) {
    size_t n = 0;
    const char* rec = transport_->round_record(r, &n);
    // In full or by its slot in the agreed cache; rank 0's label is what the
    // cache learns, on every rank alike.
    if (!negotiator_.cache().only_announcement(rec, n, round_, cfg_.size, r == 0, &a) ||
        !(a.key == mine->key) || !(a.desc == mine->desc) ||
        a.external != (mine->external != nullptr)) {
      return false;  // the full path decides, and explains
    }
    if (r == 0) fast_label_.swap(a.label);
    eager &= a.eager;
    if (a.data) fast_data_[static_cast<size_t>(r)] = a.data;
  }
  // Every rank asked for the very same collective, and only for it.
  Decision& d = fast_decision_;
  d.key = mine->key;
  d.mine = mine;
  d.mismatch.clear();
  d.eager = eager && data_complete(mine->desc, fast_data_);
  d.ahead = d.eager ? algorithms::Ahead{} : executor_.ahead_in_round(*mine, round_);
  d.data.swap(fast_data_);
  negotiator_.take(*mine, fast_label_);
  run_decision(d);
  return true;
}

bool Driver::data_complete(const Descriptor& desc, const std::vector<const char*>& data) const {
  switch (desc.kind) {
    case algorithms::CollectiveKind::kBarrier:
      return true;
    case algorithms::CollectiveKind::kBroadcast:
      return desc.count == 0 || data[static_cast<size_t>(desc.root)] != nullptr;
    case algorithms::CollectiveKind::kReduceScatter:
      return false;
    default:
      if (desc.count == 0) return true;
      for (const char* p : data) {
        if (!p) return false;
      }
      return true;
  }
}

void Driver::process_round() {
  if (fast_round()) return;
  parsed_.resize(static_cast<size_t>(cfg_.size));
  for (int r = 0; r < cfg_.size; ++r) {
    size_t n = 0;
    const char* rec = transport_->round_record(r, &n);
    std::string bad = parse_record(rec, n, round_, cfg_.size, &parsed_[static_cast<size_t>(r)]);
    if (!bad.empty()) {
      PTC_THROW(kPeerLost, transport_->describe_peer(r), " sent a malformed negotiation record (",
                bad, "): a corrupt stream or another pytfcomm version");
    }
  }
  negotiator_.absorb(round_, parsed_);
  std::vector<Decision> decisions = negotiator_.decide();
  for (const Negotiator::Resync& rs : negotiator_.resyncs()) resync_stream(rs.stream, rs.next);
  for (size_t i = 0; i < decisions.size(); ++i) {
    try {
      run_decision(decisions[i]);
    } catch (...) {
      // Decided, so no longer the negotiator's: they fail with this error.
      std::exception_ptr err = std::current_exception();
      for (size_t j = i + 1; j < decisions.size(); ++j) {
        if (decisions[j].mine) finish(decisions[j].mine, err);
      }
      throw;
    }
  }
}

void Driver::run_decision(Decision& d) {
  if (d.adopted) {
    run_adopted(d);
    return;
  }
  Request* r = d.mine;
  if (!d.mismatch.empty()) {
    finish(r, make_error(ErrorKind::kMismatch, d.mismatch));
    return;
  }
  r->agreed = true;
  try {
    executor_.execute(*r, d);
  } catch (...) {
    finish(r, std::current_exception());
    throw;
  }
  if (r->last_joined) *r->last_joined = d.last_joined;
  finish(r, nullptr);
}

void Driver::drive(const std::function<bool()>& done) {
  // A thread with no interrupt check of its own (the background thread, a TF
  // op's) stops its waits, data phases included, when interrupt_ is set.
  std::optional<FlagCheck> check;
  if (!interruptible()) check.emplace(queue_.interrupt_flag());
  while (!done()) {
    if (queue_.closing()) return;  // close() fails what is left
    if (queue_.interrupted()) {
      const char* why = queue_.interrupted_by_signal()
                            ? "interrupted by the user (Ctrl-C) while TF ops waited for their "
                              "collectives; this communicator is closed and the other ranks "
                              "were told"
                            : "interrupted by the user (a signal such as Ctrl-C) on another thread";
      fail(make_error(ErrorKind::kInterrupted, why), ErrorKind::kInterrupted,
           "interrupted by the user (Ctrl-C)");
      return;
    }
    try {
      step(done);
    } catch (const Error& e) {
      fail(std::current_exception(), e.kind(), e.what());
      return;
    } catch (const std::exception& e) {
      fail(make_error(ErrorKind::kInternal, str_cat("unexpected error: ", e.what())),
           ErrorKind::kInternal, e.what());
      return;
    }
  }
}

void Driver::fail(const std::exception_ptr& error, ErrorKind kind, const std::string& what) {
  std::string why = str_cat(error_kind_name(kind), " error in ", context_, ": ", what);
  queue_.set_failed(why, kind);
  PTC_LOG(kError, why);
  transport_->abort(what, kind);
  // Everything this rank holds fails with the class of the root cause.
  std::exception_ptr others =
      make_error(kind, str_cat("this communicator failed while the collective waited: ", why));
  std::vector<Request*> all;
  for (const auto& kv : negotiator_.mine()) all.push_back(kv.second);
  for (const auto& kv : all) negotiator_.withdraw(kv->key);
  all.insert(all.end(), fresh_.begin(), fresh_.end());
  fresh_.clear();
  take_submissions();
  all.insert(all.end(), fresh_.begin(), fresh_.end());
  fresh_.clear();
  for (Request* r : all) finish(r, kind == ErrorKind::kInterrupted ? error : others);
  (void)error;
}

void Driver::drive_until(TimePoint until, const std::function<bool()>& done) {
  inline_until_ = until;
  drive(done);
  inline_until_ = TimePoint::max();
}

void Driver::abandon(const std::exception_ptr& error) {
  for (auto& kv : negotiator_.mine()) finish(kv.second, error);
  for (Request* r : fresh_) finish(r, error);
  fresh_.clear();
}

}  // namespace pytfcomm
