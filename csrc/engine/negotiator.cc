#include "engine/negotiator.h"

#include <algorithm>
#include <map>

#include "common/error.h"

namespace pytfcomm {

Negotiator::Negotiator(int rank, int size)
    : rank_(rank), size_(size), tables_(static_cast<size_t>(size)) {}

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

void Negotiator::absorb(uint64_t round, const std::vector<ParsedRecord>& records) {
  PTC_ENFORCE(static_cast<int>(records.size()) == size_, "records of ", records.size(), " ranks");
  round_ = round;
  for (int r = 0; r < size_; ++r) {
    Table& t = tables_[static_cast<size_t>(r)];
    const ParsedRecord& rec = records[static_cast<size_t>(r)];
    // Withdrawals first: a key withdrawn in this round cannot be decided in it.
    for (const CollectiveKey& k : rec.withdrawals) t.erase(k);
    for (const Announcement& a : rec.entries) {
      Entry& e = t[a.key];
      e.desc = a.desc;
      e.label = a.label;
      e.round = round;
      e.eager = a.eager;
      e.data = a.data;
      if (r == 0) order_.push_back(a.key);
    }
  }
}

bool Negotiator::eager_ok(const CollectiveKey& k) const {
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
  const Descriptor& d0 = tables_[0].at(k).desc;
  bool same = true;
  for (int r = 1; r < size_ && same; ++r) {
    same = same_collective(tables_[static_cast<size_t>(r)].at(k).desc, d0);
  }
  if (same) return "";
  // Group the ranks by what they asked for: "rank 0: ...; ranks 1, 2: ...".
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (int r = 0; r < size_; ++r) {
    const Entry& e = tables_[static_cast<size_t>(r)].at(k);
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
  const Table& lead = tables_[0];
  size_t stale = 0;
  for (size_t i = 0; i < order_.size(); ++i) {
    const CollectiveKey k = order_[i];
    if (!lead.count(k)) {
      ++stale;
      continue;
    }
    bool common = true;
    for (int r = 1; r < size_ && common; ++r)
      common = tables_[static_cast<size_t>(r)].count(k) != 0;
    if (!common) continue;
    Decision d;
    d.key = k;
    auto mine = mine_.find(k);
    PTC_ENFORCE(mine != mine_.end(), "decided a collective this rank did not ask for");
    d.mine = mine->second;
    d.mismatch = disagreement(k);
    if (d.mismatch.empty()) {
      if (count_per_rank(lead.at(k).desc.kind)) {
        d.counts.resize(static_cast<size_t>(size_));
        for (int r = 0; r < size_; ++r) {
          d.counts[static_cast<size_t>(r)] = tables_[static_cast<size_t>(r)].at(k).desc.count;
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
    mine_.erase(mine);
    for (Table& t : tables_) t.erase(k);
    ++stale;
    out.push_back(std::move(d));
  }
  // Drop decided and withdrawn keys from the order once they are half of it.
  if (stale * 2 > order_.size()) {
    std::deque<CollectiveKey> live;
    for (const CollectiveKey& k : order_) {
      if (lead.count(k)) live.push_back(k);
    }
    order_.swap(live);
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
  }
  if (more) text += str_cat(" and ", more, " more");
  return text;
}

}  // namespace pytfcomm
