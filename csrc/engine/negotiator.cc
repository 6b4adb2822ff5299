#include "engine/negotiator.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "common/error.h"

namespace pytfcomm {

Negotiator::Negotiator(int rank, int size)
    : rank_(rank),
      size_(size),
      tables_(static_cast<size_t>(size)),
      joined_round_(static_cast<size_t>(size), -1),
      withdrawn_(static_cast<size_t>(size)) {}

void Negotiator::announce(Request* r) {
  PTC_ENFORCE(mine_.emplace(r->key, r).second, "two pending requests under one key: ", r->label);
}

void Negotiator::withdraw(const CollectiveKey& k) { mine_.erase(k); }

bool Negotiator::tables_empty() const {
  for (const Table& t : tables_) {
    if (!t.empty()) return false;
  }
  return true;
}

void Negotiator::take(const Request& mine, const std::string& label) {
  mine_.erase(mine.key);
  cache_.learn(mine.key, mine.desc, mine.external != nullptr, label);
}

void Negotiator::absorb(uint64_t round, const std::vector<ParsedRecord>& records) {
  PTC_ENFORCE(static_cast<int>(records.size()) == size_, "records of ", records.size(), " ranks");
  round_ = round;
  touched_.clear();
  forget_cache_ = false;
  for (int r = 0; r < size_; ++r) {
    const ParsedRecord& rec = records[static_cast<size_t>(r)];
    if (!rec.confirms.empty() && rec.digest != cache_.digest()) {
      // Never a guess: the slots it names may stand for other collectives here.
      PTC_THROW(kInternal, "rank ", r, " named collectives of round ", round,
                " by their slots in a cache of agreed collectives that differs from this rank's "
                "(digest ",
                rec.digest, " here ", cache_.digest(),
                "): a bug in pytfcomm or another version; set PYTFCOMM_NEGOTIATION_CACHE=0 on "
                "every rank to work around it");
    }
    if (!rec.withdrawals.empty()) forget_cache_ = true;
  }
  for (int r = 0; r < size_; ++r) {
    Table& t = tables_[static_cast<size_t>(r)];
    const ParsedRecord& rec = records[static_cast<size_t>(r)];
    // Withdrawals first: a key withdrawn in this round cannot be decided in it.
    for (const CollectiveKey& k : rec.withdrawals) {
      touched_.push_back(k.stream);
      auto gone = t.find(k);
      if (gone != t.end() && k.stream != kJoinStream) {
        auto& kept = withdrawn_[static_cast<size_t>(r)];
        if (kept.size() == kWithdrawnKept) kept.pop_front();
        kept.push_back({std::move(gone->second.label), gone->second.desc, round});
      }
      t.erase(k);
      if (k.stream == kJoinStream) joined_round_[static_cast<size_t>(r)] = -1;
    }
    auto add = [&](const Announcement& a) {
      touched_.push_back(a.key.stream);
      if (a.key.stream == kJoinStream) forget_cache_ = true;
      Entry& e = t[a.key];
      e.desc = a.desc;
      e.label = a.label;
      e.round = round;
      e.eager = a.eager;
      e.external = a.external;
      e.data = a.data;
      if (a.key.stream == kJoinStream)
        joined_round_[static_cast<size_t>(r)] = static_cast<int64_t>(round);
      if ((r == 0 || joined(0)) && ordered_.insert(a.key).second) order_.push_back(a.key);
    };
    for (const Announcement& a : rec.entries) add(a);
    for (const Confirmation& c : rec.confirms) {
      std::string bad = cache_.expand(c, &expanded_);
      if (!bad.empty()) {
        PTC_THROW(kInternal, "rank ", r, " sent ", bad, " in round ", round,
                  ": a bug in pytfcomm or another version; set PYTFCOMM_NEGOTIATION_CACHE=0 on "
                  "every rank to work around it");
      }
      add(expanded_);
    }
  }
}

bool Negotiator::live(const CollectiveKey& k) const {
  for (const Table& t : tables_) {
    if (t.count(k)) return true;
  }
  return false;
}

bool Negotiator::common(const CollectiveKey& k) const {
  const bool join = k.stream == kJoinStream;
  for (int r = 0; r < size_; ++r) {
    if (!tables_[static_cast<size_t>(r)].count(k) && (join || !joined(r))) return false;
  }
  return true;
}

const Negotiator::Entry& Negotiator::first_entry(const CollectiveKey& k) const {
  for (const Table& t : tables_) {
    auto it = t.find(k);
    if (it != t.end()) return it->second;
  }
  PTC_THROW(kInternal, "no rank asked for the collective");
}

std::string Negotiator::join_conflict(const CollectiveKey& k) const {
  std::vector<int> absent;
  for (int r = 0; r < size_; ++r) {
    if (!tables_[static_cast<size_t>(r)].count(k)) absent.push_back(r);
  }
  if (absent.empty() || k.stream == kJoinStream) return "";
  const Entry& e = first_entry(k);
  std::string who;
  for (size_t i = 0; i < absent.size() && i < 8; ++i) who += str_cat(i ? ", " : "", absent[i]);
  const std::string head = str_cat("'", e.label, "', ", describe(e.desc), " cannot run while rank",
                                   absent.size() == 1 ? " " : "s ", who,
                                   absent.size() == 1 ? " has" : " have", " joined (join()): ");
  using algorithms::CollectiveKind;
  if (e.external) {
    return head + "a GPU collective needs every rank's device buffer. Nothing was sent";
  }
  if (e.desc.kind == CollectiveKind::kAllgather) {
    return head +
           "a joined rank has no rows for an all-gather of equal shapes; use the all-gather "
           "that takes a different first dimension per rank (Horovod's allgather). Nothing was "
           "sent";
  }
  if (e.desc.kind == CollectiveKind::kBroadcast &&
      !tables_[static_cast<size_t>(e.desc.root)].count(k)) {
    return head + str_cat("its root, rank ", e.desc.root,
                          ", has joined and has nothing to send. Nothing was sent");
  }
  return "";
}

bool Negotiator::eager_ok(const CollectiveKey& k) const {
  for (const Table& t : tables_) {
    if (!t.count(k)) return false;  // a joined rank has no data in the records
  }
  const Entry& first = tables_[0].at(k);
  if (first.desc.kind == algorithms::CollectiveKind::kBarrier) return true;
  for (int r = 0; r < size_; ++r) {
    const Entry& e = tables_[static_cast<size_t>(r)].at(k);
    if (e.round != round_ || !e.eager) return false;
    bool needs_data =
        first.desc.kind != algorithms::CollectiveKind::kBroadcast || r == first.desc.root;
    if (needs_data && e.data == nullptr && e.desc.count > 0) return false;
  }
  return first.desc.kind != algorithms::CollectiveKind::kReduceScatter;
}

std::string Negotiator::disagreement(const CollectiveKey& k) const {
  const Descriptor& d0 = first_entry(k).desc;
  bool same = true;
  for (int r = 0; r < size_ && same; ++r) {
    auto it = tables_[static_cast<size_t>(r)].find(k);
    if (it != tables_[static_cast<size_t>(r)].end()) {
      same = same_collective(it->second.desc, d0) && it->second.external == first_entry(k).external;
    }
  }
  if (same) return join_conflict(k);
  // Group the ranks by what they asked for: "rank 0: ...; ranks 1, 2: ...".
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (int r = 0; r < size_; ++r) {
    auto found = tables_[static_cast<size_t>(r)].find(k);
    if (found == tables_[static_cast<size_t>(r)].end()) continue;  // joined
    const Entry& e = found->second;
    std::string what = str_cat(describe(e.desc), " as '", e.label, "'");
    auto it =
        std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == what; });
    if (it == groups.end()) {
      groups.push_back({what, {r}});
    } else {
      it->second.push_back(r);
    }
  }
  std::string text = "ranks disagree on one collective: ";
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& ranks = groups[g].second;
    text += g ? "; " : "";
    text += ranks.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < ranks.size() && i < 8; ++i) text += str_cat(i ? ", " : "", ranks[i]);
    if (ranks.size() > 8) text += str_cat(" and ", ranks.size() - 8, " more");
    text += " called " + groups[g].first;
  }
  return text +
         ". Every rank must make the same collective calls, in the same order on each thread "
         "(or under the same name), with the same kind, dtype, shape, op, root and algorithm. "
         "Nothing of it was sent; this communicator is still usable";
}

std::vector<Decision> Negotiator::decide() {
  std::vector<Decision> out;
  fail_out_of_step(&out);
  size_t stale = 0;
  bool join_decided = false;
  for (size_t i = 0; i < order_.size(); ++i) {
    const CollectiveKey k = order_[i];
    if (!live(k)) {
      ++stale;
      continue;
    }
    if (!common(k)) continue;
    Decision d;
    d.key = k;
    d.desc = first_entry(k).desc;
    auto mine = mine_.find(k);
    if (mine == mine_.end()) {
      PTC_ENFORCE(joined(rank_), "decided a collective this rank did not ask for");
      d.adopted = true;
    } else {
      d.mine = mine->second;
    }
    d.mismatch = disagreement(k);
    if (k.stream == kJoinStream) {
      join_decided = true;
      int64_t latest = -1;
      for (int r = 0; r < size_; ++r) {
        if (joined_round_[static_cast<size_t>(r)] >= latest) {
          latest = joined_round_[static_cast<size_t>(r)];
          d.last_joined = r;
        }
      }
    }
    if (!d.mismatch.empty()) forget_cache_ = true;
    if (d.mismatch.empty()) {
      const Entry& first = first_entry(k);
      if (k.stream != kJoinStream) cache_.learn(k, first.desc, first.external, first.label);
      if (count_per_rank(d.desc.kind)) {
        d.counts.assign(static_cast<size_t>(size_), 0);  // a joined rank: nothing
        for (int r = 0; r < size_; ++r) {
          auto it = tables_[static_cast<size_t>(r)].find(k);
          if (it != tables_[static_cast<size_t>(r)].end()) {
            d.counts[static_cast<size_t>(r)] = it->second.desc.count;
          }
        }
      }
      d.eager = eager_ok(k);
      if (d.eager) {
        d.data.resize(static_cast<size_t>(size_));
        for (int r = 0; r < size_; ++r) {
          d.data[static_cast<size_t>(r)] = tables_[static_cast<size_t>(r)].at(k).data;
        }
      }
    }
    if (mine != mine_.end()) mine_.erase(mine);
    for (Table& t : tables_) t.erase(k);
    ++stale;
    out.push_back(std::move(d));
  }
  if (join_decided) std::fill(joined_round_.begin(), joined_round_.end(), -1);
  // Every rank forgets the cache at the same point: what follows a
  // disagreement, a withdrawal, a join or a resync is announced in full.
  if (forget_cache_ || !resyncs_.empty()) cache_.invalidate();
  forget_cache_ = false;
  // Drop decided and withdrawn keys from the order once they are half of it.
  if (stale * 2 > order_.size()) {
    std::deque<CollectiveKey> kept;
    for (const CollectiveKey& k : order_) {
      if (live(k)) {
        kept.push_back(k);
      } else {
        ordered_.erase(k);
      }
    }
    order_.swap(kept);
  }
  // Eager inputs live in this round's records only.
  for (Table& t : tables_) {
    for (auto& kv : t) kv.second.data = nullptr;
  }
  return out;
}

std::vector<int> Negotiator::missing(const CollectiveKey& k) const {
  std::vector<int> out;
  for (int r = 0; r < size_; ++r) {
    if (!tables_[static_cast<size_t>(r)].count(k)) out.push_back(r);
  }
  return out;
}

std::string Negotiator::describe_unmatched(const CollectiveKey& k, size_t limit) const {
  std::string text;
  size_t shown = 0, more = 0;
  auto mine = tables_[static_cast<size_t>(rank_)].find(k);
  const uint64_t since = mine == tables_[static_cast<size_t>(rank_)].end() ? 0 : mine->second.round;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || tables_[static_cast<size_t>(r)].count(k)) continue;
    for (const auto& kv : tables_[static_cast<size_t>(r)]) {
      if (tables_[static_cast<size_t>(rank_)].count(kv.first)) continue;
      if (shown == limit) {
        ++more;
        continue;
      }
      text += str_cat(shown ? "; " : "", "rank ", r, " asked for '", kv.second.label, "' ",
                      describe(kv.second.desc));
      ++shown;
    }
    // What it waited in while this one waited, and gave up on before it.
    for (const Withdrawn& w : withdrawn_[static_cast<size_t>(r)]) {
      if (w.round < since) continue;
      if (shown == limit) {
        ++more;
        continue;
      }
      text += str_cat(shown ? "; " : "", "rank ", r, " asked for '", w.label, "' ",
                      describe(w.desc), " and gave up on it at its deadline");
      ++shown;
    }
  }
  if (more) text += str_cat(" and ", more, " more");
  return text;
}

std::string Negotiator::describe_waits(size_t per_rank, size_t max_groups) const {
  // Group the ranks that wait in the same: "ranks 0, 2 wait in ...; rank 1 ...".
  // A group's text has no verbs yet: "\x01" stands for waits/wait, "\x02" for
  // has/have, "\x03" for asks/ask (labels never hold control characters).
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  size_t idle = 0;
  for (int r = 0; r < size_; ++r) {
    const Table& t = tables_[static_cast<size_t>(r)];
    std::vector<std::pair<CollectiveKey, const Entry*>> waits;
    for (const auto& kv : t) waits.emplace_back(kv.first, &kv.second);
    std::sort(waits.begin(), waits.end(), [](const auto& a, const auto& b) {
      if (a.second->round != b.second->round) return a.second->round < b.second->round;
      if (a.first.stream != b.first.stream) return a.first.stream < b.first.stream;
      return a.first.seq < b.first.seq;
    });
    std::string what;
    if (waits.empty()) {
      ++idle;
      what = joined(r) ? "\x02 joined (join()) and \x01 for the others"
                       : "\x03 for no collective on this communicator (late, busy elsewhere or "
                         "stopped)";
    } else {
      what = "\x01 in ";
      for (size_t i = 0; i < waits.size() && i < per_rank; ++i) {
        const CollectiveKey& k = waits[i].first;
        const Entry& e = *waits[i].second;
        char stream[24];
        std::snprintf(stream, sizeof(stream), "0x%016llx",
                      static_cast<unsigned long long>(k.stream));
        what += str_cat(i ? ", " : "", "'", e.label, "' (", describe(e.desc), ", key ", stream, "#",
                        k.seq, ")");
      }
      if (waits.size() > per_rank) what += str_cat(" and ", waits.size() - per_rank, " more");
    }
    auto it =
        std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == what; });
    if (it == groups.end()) {
      groups.push_back({what, {r}});
    } else {
      it->second.push_back(r);
    }
  }
  std::string text;
  for (size_t g = 0; g < groups.size() && g < max_groups; ++g) {
    const auto& ranks = groups[g].second;
    text += g ? "; " : "";
    text += ranks.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < ranks.size() && i < 8; ++i) text += str_cat(i ? ", " : "", ranks[i]);
    if (ranks.size() > 8) text += str_cat(" and ", ranks.size() - 8, " more");
    text += ' ';
    for (char c : groups[g].first) {
      if (c == '\x01') {
        text += ranks.size() == 1 ? "waits" : "wait";
      } else if (c == '\x02') {
        text += ranks.size() == 1 ? "has" : "have";
      } else if (c == '\x03') {
        text += ranks.size() == 1 ? "asks" : "ask";
      } else {
        text += c;
      }
    }
  }
  if (groups.size() > max_groups) text += str_cat("; and ", groups.size() - max_groups, " more");
  if (idle > 0) {
    return text +
           ". Nothing runs until every rank asks for the same collective: a rank that asks for "
           "none is late or stuck outside pytfcomm";
  }
  return text +
         ". The ranks call different collectives: none runs until every rank asks for it, so "
         "they wait until PYTFCOMM_TIMEOUT. Every rank must make the same collective calls in "
         "the same order on each thread (or under the same name=, or in the same TF function "
         "and op); look for a branch, tf.function or call that only some ranks take";
}

}  // namespace pytfcomm
