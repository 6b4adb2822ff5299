#include "observe/stall_inspector.h"

#include <algorithm>
#include <cstdio>

#include "common/collective_kind.h"
#include "common/dtype.h"
#include "common/error.h"
#include "common/logging.h"

namespace pytfcomm {
namespace {

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

// How long a stalled rank waits for answers before it reports: blocked
// peers answer within a wait-loop tick (<= 10 ms), so this is ample.
double grace_s(double threshold_s) { return std::clamp(0.2 * threshold_s, 0.05, 2.0); }

// How long before the deadline the last question goes out, and how much
// longer a rank that waits only on waiting ranks gives the others before it
// times out itself: a quarter of the timeout, 50 ms to 1 s.
double lead_s(double timeout_s) { return std::clamp(0.25 * timeout_s, 0.05, 1.0); }

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

}  // namespace

StallInspector::StallInspector(int rank, int size, double threshold_s)
    : rank_(rank), size_(size), threshold_s_(threshold_s), peers_(static_cast<size_t>(size)) {}

void StallInspector::begin(const transport::MessageMeta& meta, const char* name, size_t bytes,
                           double timeout_s, TimePoint now) {
  active_ = true;
  timeout_s_ = timeout_s;
  meta_ = meta;
  name_ = name;
  bytes_ = bytes;
  started_ = now;
  last_ask_ = TimePoint::max();
  next_ask_ = threshold_s_ > 0 ? now + seconds(threshold_s_) : TimePoint::max();
  report_at_ = TimePoint::max();
  deadline_ = now + seconds(timeout_s);
  final_ask_ = deadline_ - seconds(lead_s(timeout_s));
  final_asked_at_ = {};
}

void StallInspector::end() { active_ = false; }

void StallInspector::begin_unmatched(TimePoint since, double timeout_s,
                                     std::function<std::string()> describe) {
  unmatched_ = true;
  describe_ = std::move(describe);
  unmatched_timeout_s_ = timeout_s;
  if (since == unmatched_since_) return;
  unmatched_since_ = since;
  unmatched_next_ = TimePoint::max();
  if (threshold_s_ > 0) {
    const Clock::duration every = seconds(threshold_s_);
    unmatched_next_ = since + every;
    if (unmatched_reported_ != TimePoint{}) {
      unmatched_next_ = std::max(unmatched_next_, unmatched_reported_ + every);
    }
  }
}

TimePoint StallInspector::unmatched_turn(TimePoint now) {
  if (now < unmatched_next_) return unmatched_next_;
  unmatched_reported_ = now;
  unmatched_next_ = now + seconds(threshold_s_);
  const double waited = std::chrono::duration<double>(now - unmatched_since_).count();
  PTC_LOG(kWarn, "stall: this rank has waited ", static_cast<int64_t>(waited * 10 + 0.5) / 10.0,
          " s for the other ranks to ask for its collectives: ", describe_ ? describe_() : "",
          ". Warning every ", threshold_s_, " s (PYTFCOMM_STALL_WARNING); the call fails ",
          unmatched_timeout_s_, " s after it was made (PYTFCOMM_TIMEOUT)");
  return unmatched_next_;
}

void StallInspector::on_status(int peer, const transport::MessageMeta& meta,
                               uint32_t flags) noexcept {
  if (peer < 0 || peer >= size_) return;
  PeerView& v = peers_[static_cast<size_t>(peer)];
  v.heard_at = Clock::now();
  v.meta = meta;
  v.in_collective = flags & transport::kStatusInCollective;
  if (flags & transport::kStatusQuery) {
    v.owe_reply = true;
    owed_ = true;
  }
}

void StallInspector::answer_owed() noexcept {
  owed_ = false;
  for (int p = 0; p < size_; ++p) {
    PeerView& v = peers_[static_cast<size_t>(p)];
    if (!v.owe_reply) continue;
    v.owe_reply = false;
    if (transport_) transport_->send_status(p, meta_, own_flags());
  }
}

void StallInspector::ask_all(TimePoint now) {
  last_ask_ = now;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    peers_[static_cast<size_t>(p)].owe_reply = false;  // the question carries our state
    if (transport_) transport_->send_status(p, meta_, transport::kStatusQuery | own_flags());
  }
}

TimePoint StallInspector::on_block(TimePoint now) noexcept {
  try {
    if (owed_) answer_owed();
    const TimePoint unmatched = unmatched_ ? unmatched_turn(now) : TimePoint::max();
    if (!active_) return unmatched;
    if (now >= next_ask_) {
      ask_all(now);
      report_at_ = now + seconds(grace_s(threshold_s_));
      next_ask_ = now + seconds(threshold_s_);
    }
    if (now >= report_at_) {
      report_at_ = TimePoint::max();
      PTC_LOG(kWarn, report());
    }
    if (final_asked_at_ == TimePoint{} && now >= final_ask_) {
      ask_all(now);  // silently: what it learns goes into a timeout's message
      final_asked_at_ = now;
    }
    TimePoint final = final_asked_at_ == TimePoint{} ? final_ask_ : TimePoint::max();
    return std::min({next_ask_, report_at_, final, unmatched});
  } catch (...) {
    // Diagnostics must never fail a collective; PYTFCOMM_TIMEOUT still applies.
    return TimePoint::max();
  }
}

transport::StallVerdict StallInspector::on_deadline(TimePoint /*now*/) noexcept {
  transport::StallVerdict v;
  if (!active_ || final_asked_at_ == TimePoint{}) return v;
  try {
    v.asked = true;
    // A rank that did not answer the last question is not inside pytfcomm
    // (hung, stopped, late); one that answered from an older collective is
    // stuck there. Every other rank is waiting like this one.
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      const PeerView& pv = peers_[static_cast<size_t>(p)];
      std::string who = transport_ ? transport_->describe_peer(p) : str_cat("rank ", p);
      std::string why;
      if (pv.heard_at == TimePoint{} || pv.heard_at < final_asked_at_) {
        why = str_cat(who, " has not joined this collective or stopped answering (no reply to a ",
                      "status query: hung, stopped, or busy outside pytfcomm)");
        v.silent.push_back(p);
      } else if (pv.meta.seq < meta_.seq) {
        why = str_cat(who, " is still in ", kind_name(static_cast<CollectiveKind>(pv.meta.kind)),
                      " #", pv.meta.seq);
      } else {
        continue;
      }
      v.culprits.push_back(p);
      v.text += (v.text.empty() ? "" : "; ") + why;
    }
    bool direct = false;
    if (transport_) {
      for (int p : transport_->pending_peers()) {
        direct |= std::find(v.culprits.begin(), v.culprits.end(), p) != v.culprits.end();
      }
    }
    if (!v.culprits.empty() && !direct) v.wait_until = deadline_ + seconds(lead_s(timeout_s_));
  } catch (...) {
    return {};  // diagnostics never fail anything; the plain timeout stands
  }
  return v;
}

std::string StallInspector::report() const {
  std::string missing, joined, ahead;
  auto add = [](std::string& list, const std::string& item) {
    list += (list.empty() ? "" : ", ") + item;
  };
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    const PeerView& v = peers_[static_cast<size_t>(p)];
    std::string who = transport_ ? transport_->describe_peer(p) : str_cat("rank ", p);
    bool recent = v.heard_at != TimePoint{} && v.heard_at >= started_;
    // Rounds and collectives are numbered apart: compare like with like.
    const auto neg = static_cast<uint8_t>(CollectiveKind::kNegotiate);
    const bool same_kind = (v.meta.kind == neg) == (meta_.kind == neg);
    if (recent && same_kind && v.meta.seq == meta_.seq) {
      add(joined, str_cat("rank ", p));
    } else if (recent && same_kind && v.meta.seq > meta_.seq) {
      add(ahead, str_cat("rank ", p, " (in ", kind_name(static_cast<CollectiveKind>(v.meta.kind)),
                         " #", v.meta.seq, ")"));
    } else if (v.heard_at != TimePoint{} && v.heard_at >= last_ask_) {
      add(missing, str_cat(who, " is still in ",
                           kind_name(static_cast<CollectiveKind>(v.meta.kind)), " #", v.meta.seq));
    } else {
      add(missing, str_cat(who, " has not joined it (no answer: not inside pytfcomm -- late, ",
                           "busy elsewhere or stopped)"));
    }
  }
  std::string waits;
  if (transport_) {
    for (int p : transport_->pending_peers()) add(waits, str_cat("rank ", p));
  }
  std::string shape = meta_.shape_tag ? str_cat(", shape tag ", hex32(meta_.shape_tag)) : "";
  // Waiting in a negotiation round: for the other ranks to ask for anything.
  const bool negotiating = meta_.kind == static_cast<uint8_t>(CollectiveKind::kNegotiate);
  std::string what = negotiating ? std::string(name_)
                                 : str_cat(name_, " #", meta_.seq, " (",
                                           dtype_name(static_cast<DType>(meta_.dtype)), " x ",
                                           meta_.count, ", ", bytes_, " bytes", shape, ")");
  return str_cat(
      "stall: ", what, " has waited ",
      static_cast<int64_t>(seconds_since(started_) * 10 + 0.5) / 10.0, " s on this rank. ",
      missing.empty() ? std::string("Every rank is in it (a slow transfer?)")
                      : str_cat("Holding it back: ", missing),
      joined.empty() ? "" : str_cat(". In it: ", joined), ahead.empty() ? "" : ". Ahead: ", ahead,
      waits.empty() ? "" : str_cat(". This rank waits on ", waits), ". Warning every ",
      threshold_s_, " s (PYTFCOMM_STALL_WARNING); the collective fails at ", timeout_s_,
      " s (PYTFCOMM_TIMEOUT)");
}

}  // namespace pytfcomm
