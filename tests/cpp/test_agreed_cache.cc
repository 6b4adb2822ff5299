// The cache of agreed collectives (engine/agreed_cache.h): records confirm a
// collective agreed before by its slot; a confirmation stands for exactly the
// announcement it replaces, so disagreements stay MismatchErrors on every
// rank in the same round; every rank forgets the cache at the same points.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "engine/agreed_cache.h"
#include "negotiation_sim.h"
#include "test_util.h"

namespace pytfcomm {
namespace {

using testing_util::NegotiationSim;

constexpr uint64_t kMain = 0x6d61696e;   // a thread's stream
constexpr uint64_t kGrads = 0x67726164;  // a named stream

Descriptor allreduce(uint64_t count) {
  Descriptor d;
  d.kind = algorithms::CollectiveKind::kAllreduce;
  d.count = count;
  return d;
}

// Every rank calls `d` on `stream` once; one round decides it.
void everyone(NegotiationSim& sim, uint64_t stream, const Descriptor& d) {
  for (int r = 0; r < sim.size(); ++r) sim.call(r, stream, d, "allreduce train_step/grad");
  sim.round();
}

TEST(AgreedCache, RecordsCarryConfirmationsBesideEntriesAndWithdrawals) {
  AgreedCache cache;
  Request a;
  a.key = {kMain, 3};
  a.desc = allreduce(4);
  a.label = "allreduce #3 of MainThread";
  cache.learn(a.key, a.desc, false, a.label);
  a.key.seq = 4;
  a.label = "allreduce #4 of MainThread";
  ASSERT_EQ(cache.slot_of(a), 0);
  Request b;
  b.key = {kGrads, 0};
  b.desc = allreduce(8);
  b.label = "grads";
  std::vector<char> buf(4096);
  RecordWriter w(buf.data(), buf.size(), 9);
  const float in[4] = {1, 2, 3, 4};
  a.in = in;
  ASSERT_TRUE(add_announcement(w, &cache, a, true, sizeof(in)));
  ASSERT_TRUE(add_announcement(w, &cache, b, false, 0));  // not in the cache: in full
  ASSERT_TRUE(w.add_withdrawal({kGrads, 7}));
  EXPECT_EQ(w.confirms(), 1u);
  EXPECT_EQ(w.entries(), 1u);
  const size_t n = w.finish();
  ParsedRecord p;
  ASSERT_EQ(parse_record(buf.data(), n, 9, 2, &p), "");
  ASSERT_EQ(p.confirms.size(), 1u);
  EXPECT_EQ(p.digest, cache.digest());
  Announcement x;
  ASSERT_EQ(cache.expand(p.confirms[0], &x), "");
  EXPECT_EQ(x.key, a.key);
  EXPECT_EQ(x.desc, a.desc);
  EXPECT_EQ(x.label, "allreduce #4 of MainThread");
  ASSERT_NE(x.data, nullptr);
  EXPECT_EQ(x.data_bytes, sizeof(in));
  EXPECT_EQ(std::memcmp(x.data, in, sizeof(in)), 0);
  ASSERT_EQ(p.entries.size(), 1u);
  EXPECT_EQ(p.entries[0].label, "grads");
  ASSERT_EQ(p.withdrawals.size(), 1u);

  // Garbage in a confirmation is refused before anything is read through it.
  RecordHeader h;
  std::memcpy(&h, buf.data(), sizeof(h));
  const size_t at = record_confirms_at(h);
  auto refused = [&](auto&& spoil) {
    std::vector<char> bad(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
    RecordConfirm c;
    std::memcpy(&c, bad.data() + at, sizeof(c));
    spoil(c);
    std::memcpy(bad.data() + at, &c, sizeof(c));
    ParsedRecord q;
    return !parse_record(bad.data(), bad.size(), 9, 2, &q).empty();
  };
  EXPECT_TRUE(refused([](RecordConfirm& c) { c.flags = 4; }));
  EXPECT_TRUE(refused([](RecordConfirm& c) { c.eager_offset = 64; }));  // inside the table
  EXPECT_TRUE(refused([&](RecordConfirm& c) { c.eager_offset = static_cast<uint32_t>(n); }));
  EXPECT_TRUE(refused([](RecordConfirm& c) { c.eager_offset += 1; }));
  // An input that overruns the record, an empty slot: refused on expansion.
  Confirmation c = p.confirms[0];
  c.data_room = sizeof(in) - 1;
  EXPECT_NE(cache.expand(c, &x), "");
  c = p.confirms[0];
  c.slot = 1;
  EXPECT_NE(cache.expand(c, &x), "");
  c.slot = 0xffff;
  EXPECT_NE(cache.expand(c, &x), "");
  // A header that claims more confirmations than fit.
  std::vector<char> bad(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
  h.confirms = 200;
  std::memcpy(bad.data(), &h, sizeof(h));
  EXPECT_NE(parse_record(bad.data(), bad.size(), 9, 2, &p), "");
}

TEST(AgreedCache, SlotsMatchStreamDescriptorAndNameAndEvictTheLeastRecent) {
  AgreedCache cache;
  const uint64_t empty = cache.digest();
  cache.learn({kMain, 0}, allreduce(4), false, "allreduce #0 of MainThread");
  EXPECT_NE(cache.digest(), empty);
  auto call = [](uint64_t stream, uint64_t seq, uint64_t count, const char* label) {
    auto r = std::make_unique<Request>();
    r->key = {stream, seq};
    r->desc = allreduce(count);
    r->label = label;
    return r;
  };
  auto rp = call(kMain, 7, 4, "allreduce #7 of MainThread");
  const Request& r = *rp;
  EXPECT_EQ(cache.slot_of(r), 0);
  EXPECT_EQ(cache.slot_of(*call(kMain, 7, 5, "allreduce #7 of MainThread")), -1);
  EXPECT_EQ(cache.slot_of(*call(kGrads, 7, 4, "allreduce #7 of MainThread")), -1);
  EXPECT_EQ(cache.slot_of(*call(kMain, 7, 4, "allreduce #7 of Thread-1")), -1);
  // Not this call's number.
  EXPECT_EQ(cache.slot_of(*call(kMain, 7, 4, "allreduce #6 of MainThread")), -1);
  // Full: the least recently decided slot goes, the same on every rank.
  for (uint64_t i = 1; i < AgreedCache::kSlots; ++i) {
    cache.learn({kGrads + i, 0}, allreduce(i), false, "n");
  }
  cache.learn({kMain, 8}, allreduce(4), false, "allreduce #8 of MainThread");  // slot 0 used again
  cache.learn({kGrads, 0}, allreduce(1), false, "new");
  EXPECT_EQ(cache.size(), AgreedCache::kSlots);
  EXPECT_EQ(cache.slot_of(r), 0);
  EXPECT_EQ(cache.slot_of(*call(kGrads + 1, 0, 1, "n")), -1);
  const uint64_t full = cache.digest();
  cache.invalidate();
  EXPECT_EQ(cache.slot_of(r), -1);
  EXPECT_NE(cache.digest(), full);
  EXPECT_NE(cache.digest(), empty);  // a new epoch
}

TEST(AgreedCache, SteadyStateRecordsConfirmBySlot) {
  NegotiationSim sim(4, true);
  everyone(sim, kMain, allreduce(1 << 20));
  sim.reset_cost();
  for (int i = 0; i < 10; ++i) {
    everyone(sim, kMain, allreduce(1 << 20));
    for (int r = 0; r < 4; ++r) {
      ASSERT_EQ(sim.decided(r).size(), 1u);
      EXPECT_EQ(sim.decided(r)[0].mismatch, "");
      EXPECT_EQ(sim.decided(r)[0].key, (CollectiveKey{kMain, uint64_t(i) + 1}));
    }
  }
  for (int r = 0; r < 4; ++r) EXPECT_EQ(sim.cost(r).record_bytes, 10u * 64) << r;
}

TEST(AgreedCache, ACachedCallMeetingADifferentOneIsAMismatchOnEveryRankThenForgotten) {
  NegotiationSim sim(3, true);
  everyone(sim, kMain, allreduce(100));
  everyone(sim, kMain, allreduce(100));  // confirmed by slot
  // Ranks 0 and 2 confirm the agreed call by slot; rank 1 makes another one
  // (in full), and a new named call comes in the same round on every rank.
  for (int r = 0; r < 3; ++r) {
    sim.call(r, kMain, allreduce(r == 1 ? 99 : 100), "allreduce train_step/grad");
    sim.call(r, kGrads, allreduce(8), "grads");
  }
  sim.round();
  for (int r = 0; r < 3; ++r) {
    auto d = sim.decided(r);
    ASSERT_EQ(d.size(), 2u) << r;
    // Confirmations follow a record's full entries: the new call's decision comes first.
    std::swap(d[0], d[1]);
    EXPECT_EQ(d[0].key, (CollectiveKey{kMain, 2}));
    EXPECT_EQ(d[1].key, (CollectiveKey{kGrads, 0}));
    EXPECT_NE(d[0].mismatch.find("ranks disagree"), std::string::npos) << d[0].mismatch;
    EXPECT_NE(d[0].mismatch.find("ranks 0, 2 called allreduce(float32 x 100"), std::string::npos)
        << d[0].mismatch;
    EXPECT_NE(d[0].mismatch.find("rank 1 called allreduce(float32 x 99"), std::string::npos);
    EXPECT_EQ(d[1].mismatch, "");
    EXPECT_EQ(sim.negotiator(r).cache().size(), 0u) << r;  // forgotten everywhere
    EXPECT_EQ(sim.negotiator(r).cache().digest(), sim.negotiator(0).cache().digest());
  }
  // Then in full once, and by slot again.
  sim.reset_cost();
  everyone(sim, kMain, allreduce(100));
  EXPECT_GT(sim.cost(0).record_bytes, 64u);
  sim.reset_cost();
  everyone(sim, kMain, allreduce(100));
  EXPECT_EQ(sim.cost(0).record_bytes, 64u);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(sim.decided(r)[0].mismatch, "");
}

TEST(AgreedCache, RanksConfirmingInDifferentRoundsStillPair) {
  NegotiationSim sim(3, true);
  everyone(sim, kMain, allreduce(10));
  sim.call(0, kMain, allreduce(10), "allreduce train_step/grad");  // rank 0 early
  sim.round();
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(sim.decided(r).empty());
  sim.call(1, kMain, allreduce(10), "allreduce train_step/grad");
  sim.call(2, kMain, allreduce(10), "allreduce train_step/grad");
  sim.round();
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(sim.decided(r).size(), 1u);
    EXPECT_EQ(sim.decided(r)[0].mismatch, "");
  }
}

TEST(AgreedCache, WithdrawalsJoinsAndResyncsForgetTheCacheOnEveryRank) {
  NegotiationSim sim(2, true);
  everyone(sim, kMain, allreduce(10));
  ASSERT_EQ(sim.negotiator(1).cache().size(), 1u);
  // Rank 0 gives up on a call rank 1 never makes: the withdrawal is seen by both.
  Request* lone = sim.call(0, kGrads, allreduce(1), "grads");
  sim.round();
  sim.negotiator(0).withdraw(lone->key);
  std::vector<char> buf(4096);
  // Withdrawals travel in the records: a round with one (the sim has no
  // deadlines, so the record is built here as the driver builds it).
  RecordWriter w(buf.data(), buf.size(), 3);
  ASSERT_TRUE(w.add_withdrawal(lone->key));
  const size_t n = w.finish();
  std::vector<ParsedRecord> recs(2);
  ASSERT_EQ(parse_record(buf.data(), n, 3, 2, &recs[0]), "");
  for (int r = 0; r < 2; ++r) {
    sim.negotiator(r).absorb(3, recs);
    sim.negotiator(r).decide();
    EXPECT_EQ(sim.negotiator(r).cache().size(), 0u) << r;
  }
}

TEST(AgreedCache, ADivergedCacheIsNeverConfirmed) {
  NegotiationSim sim(2, true);
  everyone(sim, kMain, allreduce(10));
  // Rank 1's record names slot 0 under another digest: both ranks refuse it.
  Request r;
  r.key = {kMain, 1};
  r.desc = allreduce(10);
  r.label = "allreduce train_step/grad #1";
  std::vector<std::vector<char>> bufs(2, std::vector<char>(4096));
  std::vector<ParsedRecord> recs(2);
  for (int k = 0; k < 2; ++k) {
    RecordWriter w(bufs[k].data(), bufs[k].size(), 2);
    w.add_confirm(r, 0, sim.negotiator(k).cache().digest() + k, false, nullptr, 0);
    const size_t n = w.finish();
    ASSERT_EQ(parse_record(bufs[k].data(), n, 2, 2, &recs[k]), "");
  }
  for (int k = 0; k < 2; ++k) {
    try {
      sim.negotiator(k).absorb(2, recs);
      ADD_FAILURE() << "rank " << k << " took a confirmation of another cache";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("differs from this rank's"), std::string::npos);
    }
  }
}

TEST(AgreedCache, RanksOutOfStepStillFailTogetherWhenConfirmingBySlot) {
  NegotiationSim sim(2, true);
  everyone(sim, kMain, allreduce(10));
  everyone(sim, kMain, allreduce(10));
  // Rank 1 skipped a call the other made: both confirm by slot, with
  // different numbers, which can never pair.
  sim.skip(1, kMain);
  sim.call(0, kMain, allreduce(10), "allreduce train_step/grad");
  sim.call(1, kMain, allreduce(10), "allreduce train_step/grad");
  sim.round();
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(sim.decided(r).size(), 1u) << r;
    EXPECT_NE(sim.decided(r)[0].mismatch.find("out of step"), std::string::npos)
        << sim.decided(r)[0].mismatch;
    EXPECT_EQ(sim.negotiator(r).cache().size(), 0u) << r;
  }
  everyone(sim, kMain, allreduce(10));  // numbered alike again
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(sim.decided(r).size(), 1u) << r;
    EXPECT_EQ(sim.decided(r)[0].mismatch, "");
    EXPECT_EQ(sim.decided(r)[0].key, (CollectiveKey{kMain, 4}));
  }
}

// The engine itself, ranks as threads over loopback TCP: repeated calls
// (confirmed by slot after the first), new names on the way, and a call on
// the agreed stream that rank 1 makes one element short while the others
// confirm the agreed one by slot: a MismatchError on every rank, and the
// calls after it pair again with the right sums.
TEST(AgreedCache, EngineMixesCachedNewAndDisagreeingCalls) {
  setenv("PYTFCOMM_CONNECT_TIMEOUT", "30", 0);
  setenv("PYTFCOMM_TIMEOUT", "60", 0);
  constexpr int kRanks = 3;
  std::vector<std::string> kinds(kRanks);
  std::vector<int> wrong(kRanks, 0);
  testing_util::run_ranks(kRanks, [&](Communicator& comm) {
    const int r = comm.rank();
    auto sum = [&](size_t count, double mine, const CallKey* key = nullptr) {
      std::vector<double> x(count, mine), y(count);
      comm.allreduce(x.data(), y.data(), count, DType::kFloat64, ReduceOp::kSum, Algorithm::kAuto,
                     0, 0, key);
      return y[count - 1];
    };
    for (int i = 0; i < 30; ++i) {
      const size_t count = i % 2 ? 16 : 100000;  // within the round, and after it
      if (sum(count, i + r) != 3.0 * i + 3) ++wrong[static_cast<size_t>(r)];
      if (i % 7 == 2) {
        const CallKey fresh{"new-" + std::to_string(i)};
        if (sum(8, r, &fresh) != 3.0) ++wrong[static_cast<size_t>(r)];
      }
      if (i == 15) {
        try {
          sum(r == 1 ? 15 : 16, 1.0);
        } catch (const Error& e) {
          kinds[static_cast<size_t>(r)] = error_kind_name(e.kind());
        }
      }
    }
  });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(kinds[static_cast<size_t>(r)], "mismatch") << r;
    EXPECT_EQ(wrong[static_cast<size_t>(r)], 0) << r;
  }
}

}  // namespace
}  // namespace pytfcomm
