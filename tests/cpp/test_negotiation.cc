// The negotiation's records and decisions, without any transport: ranks that
// announce in different orders and rounds make the same decisions; a
// disagreement is seen by all; withdrawals win over decisions in their round.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "engine/negotiator.h"
#include "engine/round_record.h"

namespace pytfcomm {
namespace {

std::unique_ptr<Request> make(uint64_t stream, uint64_t seq, uint64_t count,
                              const char* label = "x") {
  auto r = std::make_unique<Request>();
  r->key = {stream, seq};
  r->desc.count = count;
  r->label = label;
  return r;
}

// Every rank's record of one round, built and parsed as the wire would.
struct Round {
  std::vector<std::vector<char>> bufs;
  std::vector<ParsedRecord> parsed;
};

Round build_round(uint64_t round, const std::vector<std::vector<Request*>>& announce,
                  const std::vector<std::vector<CollectiveKey>>& withdraw = {}) {
  const int n = static_cast<int>(announce.size());
  Round out;
  out.bufs.assign(static_cast<size_t>(n), std::vector<char>(1 << 16));
  out.parsed.resize(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    auto& buf = out.bufs[static_cast<size_t>(r)];
    RecordWriter w(buf.data(), buf.size(), round);
    if (!withdraw.empty()) {
      for (const auto& k : withdraw[static_cast<size_t>(r)]) EXPECT_TRUE(w.add_withdrawal(k));
    }
    for (Request* q : announce[static_cast<size_t>(r)]) {
      static const float kData[4] = {1, 2, 3, 4};
      const bool eager = q->desc.count <= 4;
      w.add(*q, eager, kData, eager ? q->bytes() : 0);
    }
    size_t bytes = w.finish();
    EXPECT_EQ(parse_record(buf.data(), bytes, round, n, &out.parsed[static_cast<size_t>(r)]), "");
  }
  return out;
}

TEST(RoundRecord, RoundTripsEntriesWithdrawalsAndInputs) {
  std::vector<char> buf(4096);
  auto ap = make(11, 3, 4, "allreduce #3 of MainThread");
  Request& a = *ap;
  a.desc.shape_tag = 0x1234;
  RecordWriter w(buf.data(), buf.size(), 9);
  const float in[4] = {1.5f, 2, 3, 4};
  w.add(a, true, in, sizeof(in));
  ASSERT_TRUE(w.add_withdrawal({12, 5}));
  size_t n = w.finish();
  ParsedRecord p;
  ASSERT_EQ(parse_record(buf.data(), n, 9, 2, &p), "");
  ASSERT_EQ(p.entries.size(), 1u);
  EXPECT_EQ(p.entries[0].key, (CollectiveKey{11, 3}));
  EXPECT_EQ(p.entries[0].label, "allreduce #3 of MainThread");
  EXPECT_EQ(p.entries[0].desc.shape_tag, 0x1234u);
  ASSERT_NE(p.entries[0].data, nullptr);
  EXPECT_EQ(std::memcmp(p.entries[0].data, in, sizeof(in)), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p.entries[0].data) % kRecordAlign,
            reinterpret_cast<uintptr_t>(buf.data()) % kRecordAlign);
  ASSERT_EQ(p.withdrawals.size(), 1u);
  EXPECT_EQ(p.withdrawals[0], (CollectiveKey{12, 5}));
  // Another round's record, a truncated one, a lying length: refused.
  EXPECT_NE(parse_record(buf.data(), n, 10, 2, &p), "");
  EXPECT_NE(parse_record(buf.data(), n - 1, 9, 2, &p), "");
  RecordHeader h;
  std::memcpy(&h, buf.data(), sizeof(h));
  h.entries = 300;
  std::memcpy(buf.data(), &h, sizeof(h));
  EXPECT_NE(parse_record(buf.data(), n, 9, 2, &p), "");
}

// A record that says its one collective's first message went ahead
// (engine/sent_ahead.cc) keeps the flag; with any other announcement,
// confirmation or withdrawal beside it the flag is a broken record.
TEST(RoundRecord, SentAheadOnlyWithOneAnnouncement) {
  std::vector<char> buf(4096);
  auto ap = make(11, 3, 1 << 16);
  RecordWriter w(buf.data(), buf.size(), 4);
  w.add(*ap, false, nullptr, 0);
  w.set_sent_ahead();
  size_t n = w.finish();
  ParsedRecord p;
  ASSERT_EQ(parse_record(buf.data(), n, 4, 4, &p), "");
  RecordHeader h;
  std::memcpy(&h, buf.data(), sizeof(h));
  EXPECT_EQ(h.flags, kRecordSentAhead);
  // Reused for the next round: the flag is not carried over.
  w.reset(buf.data(), buf.size(), 5);
  w.add(*ap, false, nullptr, 0);
  ASSERT_TRUE(w.add_withdrawal({12, 5}));
  n = w.finish();
  std::memcpy(&h, buf.data(), sizeof(h));
  EXPECT_EQ(h.flags, 0);
  h.flags = kRecordSentAhead;  // a withdrawal beside it
  std::memcpy(buf.data(), &h, sizeof(h));
  EXPECT_NE(parse_record(buf.data(), n, 5, 4, &p), "");
}

TEST(RoundRecord, InputsPointingOutsideTheRecordAreRefused) {
  std::vector<char> buf(4096);
  auto ap = make(1, 0, 4);
  Request& a = *ap;
  RecordWriter w(buf.data(), buf.size(), 1);
  const float in[4] = {};
  w.add(a, true, in, sizeof(in));
  size_t n = w.finish();
  RecordEntry e;
  std::memcpy(&e, buf.data() + sizeof(RecordHeader), sizeof(e));
  e.eager_offset = n - 8;  // the input would run past the end
  std::memcpy(buf.data() + sizeof(RecordHeader), &e, sizeof(e));
  ParsedRecord p;
  EXPECT_NE(parse_record(buf.data(), n, 1, 2, &p), "");
}

// Three ranks announce the same three collectives in different orders and in
// different rounds: every rank decides the same ones in the same order
// (rank 0's), each exactly once, in the round the last rank asked.
TEST(Negotiator, SameDecisionsWhateverTheOrder) {
  const int n = 3;
  std::vector<std::vector<std::unique_ptr<Request>>> reqs(n);
  for (int r = 0; r < n; ++r) {
    for (uint64_t s = 1; s <= 3; ++s) reqs[r].push_back(make(s, 0, 100 * s));
  }
  std::vector<Negotiator> neg;
  for (int r = 0; r < n; ++r) neg.emplace_back(r, n);
  auto announce = [&](int r, std::vector<int> which) {
    std::vector<Request*> out;
    for (int i : which) {
      out.push_back(reqs[r][i].get());
      neg[r].announce(reqs[r][i].get());
    }
    return out;
  };
  // Round 1: rank 0 asks for 0,1,2; rank 1 for 2; rank 2 for 1,2.
  std::vector<std::vector<Request*>> r1 = {announce(0, {0, 1, 2}), announce(1, {2}),
                                           announce(2, {1, 2})};
  Round round1 = build_round(1, r1);
  std::vector<std::vector<CollectiveKey>> decided(n);
  for (int r = 0; r < n; ++r) {
    neg[r].absorb(1, round1.parsed);
    for (auto& d : neg[r].decide()) {
      EXPECT_EQ(d.mismatch, "");
      EXPECT_EQ(d.mine, reqs[r][d.key.stream - 1].get());
      decided[r].push_back(d.key);
    }
  }
  for (int r = 0; r < n; ++r) EXPECT_EQ(decided[r], (std::vector<CollectiveKey>{{3, 0}})) << r;
  // Round 2: rank 1 asks for 1 then 0, rank 2 for 0.
  std::vector<std::vector<Request*>> r2 = {{}, announce(1, {1, 0}), announce(2, {0})};
  Round round2 = build_round(2, r2);
  for (int r = 0; r < n; ++r) {
    decided[r].clear();
    neg[r].absorb(2, round2.parsed);
    for (auto& d : neg[r].decide()) decided[r].push_back(d.key);
    EXPECT_EQ(decided[r], (std::vector<CollectiveKey>{{1, 0}, {2, 0}})) << r;  // rank 0's order
    EXPECT_TRUE(neg[r].mine().empty());
    EXPECT_TRUE(neg[r].tables_empty());
  }
}

TEST(Negotiator, DisagreementIsSeenByEveryRankWithWhatEachAskedFor) {
  const int n = 2;
  auto p0 = make(7, 0, 10, "allreduce #0 of T"), p1 = make(7, 0, 11, "allreduce #0 of T");
  Request &a0 = *p0, &a1 = *p1;
  a1.desc.kind = algorithms::CollectiveKind::kBroadcast;
  a1.desc.root = 1;
  Negotiator n0(0, n), n1(1, n);
  n0.announce(&a0);
  n1.announce(&a1);
  Round round = build_round(1, {{&a0}, {&a1}});
  for (Negotiator* g : {&n0, &n1}) {
    g->absorb(1, round.parsed);
    auto ds = g->decide();
    ASSERT_EQ(ds.size(), 1u);
    EXPECT_NE(ds[0].mismatch.find("rank 0 called allreduce(float32 x 10"), std::string::npos)
        << ds[0].mismatch;
    EXPECT_NE(ds[0].mismatch.find("rank 1 called broadcast(float32 x 11, root 1)"),
              std::string::npos)
        << ds[0].mismatch;
    EXPECT_FALSE(ds[0].eager);
  }
}

TEST(Negotiator, WithdrawalBeatsADecisionInItsRound) {
  const int n = 2;
  auto p0 = make(5, 0, 10), p1 = make(5, 0, 10);
  Request &a0 = *p0, &a1 = *p1;
  Negotiator n0(0, n), n1(1, n);
  n0.announce(&a0);
  // Round 1: only rank 0 asks.
  Round round1 = build_round(1, {{&a0}, {}});
  n0.absorb(1, round1.parsed);
  n1.absorb(1, round1.parsed);
  EXPECT_TRUE(n0.decide().empty());
  EXPECT_TRUE(n1.decide().empty());
  EXPECT_EQ(n0.missing({5, 0}), (std::vector<int>{1}));
  // Round 2: rank 0 gives up on it while rank 1 asks for it: nobody runs it.
  n0.withdraw({5, 0});
  n1.announce(&a1);
  Round round2 = build_round(2, {{}, {&a1}}, {{{5, 0}}, {}});
  n0.absorb(2, round2.parsed);
  n1.absorb(2, round2.parsed);
  EXPECT_TRUE(n0.decide().empty());
  EXPECT_TRUE(n1.decide().empty());
  EXPECT_NE(n1.describe_unmatched({5, 0}), "x");
}

TEST(Negotiator, EagerOnlyWhenEveryRankBroughtItsInputInTheSameRound) {
  const int n = 2;
  auto pa0 = make(1, 0, 4), pa1 = make(1, 0, 4);  // small: inputs in the records
  auto pb0 = make(2, 0, 4), pb1 = make(2, 0, 4);
  Request &a0 = *pa0, &a1 = *pa1, &b0 = *pb0, &b1 = *pb1;
  Negotiator n0(0, n), n1(1, n);
  n0.announce(&a0);
  n1.announce(&a1);
  n0.announce(&b0);
  Round round1 = build_round(1, {{&a0, &b0}, {&a1}});
  n0.absorb(1, round1.parsed);
  auto d1 = n0.decide();
  ASSERT_EQ(d1.size(), 1u);
  EXPECT_TRUE(d1[0].eager);
  ASSERT_EQ(d1[0].data.size(), 2u);
  EXPECT_NE(d1[0].data[0], nullptr);
  EXPECT_NE(d1[0].data[1], nullptr);
  // b: rank 0's input came in round 1, rank 1's in round 2: moved after the round.
  n1.announce(&b1);
  Round round2 = build_round(2, {{}, {&b1}});
  n0.absorb(2, round2.parsed);
  auto d2 = n0.decide();
  ASSERT_EQ(d2.size(), 1u);
  EXPECT_FALSE(d2[0].eager);
}

// Labels travel whole up to kMaxLabelBytes (a record once kept 39
// characters, so two functions' ops both read "...llreduce/PytfcommAllReduce");
// a longer one keeps its start and its end.
TEST(RoundRecord, LabelsTravelWholeUpToTheBound) {
  std::vector<char> buf(1 << 16);
  const std::string long_a = "allreduce a" + std::string(300, 'x') + "/PytfcommAllReduce #0";
  const std::string huge = "allreduce b" + std::string(3000, 'y') + "/PytfcommAllReduce #7";
  auto pa = make(1, 0, 4, long_a.c_str()), pb = make(2, 0, 4000, huge.c_str());
  auto pc = make(3, 0, 4, "");
  RecordWriter w(buf.data(), buf.size(), 1);
  const float in[4] = {1, 2, 3, 4};
  w.add(*pa, true, in, sizeof(in));
  w.add(*pb, false, nullptr, 0);
  w.add(*pc, true, in, sizeof(in));
  size_t n = w.finish();
  ParsedRecord p;
  ASSERT_EQ(parse_record(buf.data(), n, 1, 2, &p), "");
  ASSERT_EQ(p.entries.size(), 3u);
  EXPECT_EQ(p.entries[0].label, long_a);
  EXPECT_EQ(p.entries[1].label.size(), kMaxLabelBytes);
  EXPECT_EQ(p.entries[1].label.substr(0, 100), huge.substr(0, 100));
  EXPECT_NE(p.entries[1].label.find("..."), std::string::npos);
  EXPECT_EQ(p.entries[1].label.substr(kMaxLabelBytes - 30), huge.substr(huge.size() - 30));
  EXPECT_EQ(p.entries[2].label, "");
  ASSERT_NE(p.entries[2].data, nullptr);
  EXPECT_EQ(std::memcmp(p.entries[2].data, in, sizeof(in)), 0);
}

TEST(RoundRecord, LabelsOutsideTheirAreaAreRefused) {
  std::vector<char> buf(4096);
  auto pa = make(1, 0, 4, "allreduce 'a' #0"), pb = make(2, 0, 4, "allreduce 'b' #0");
  RecordWriter w(buf.data(), buf.size(), 1);
  w.add(*pa, false, nullptr, 0);
  w.add(*pb, false, nullptr, 0);
  const size_t n = w.finish();
  ParsedRecord p;
  ASSERT_EQ(parse_record(buf.data(), n, 1, 2, &p), "");
  const size_t second = sizeof(RecordHeader) + sizeof(RecordEntry);
  auto mutated = [&](auto change) {
    std::vector<char> copy(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
    RecordHeader h;
    RecordEntry e;
    std::memcpy(&h, copy.data(), sizeof(h));
    std::memcpy(&e, copy.data() + second, sizeof(e));
    change(h, e);
    std::memcpy(copy.data(), &h, sizeof(h));
    std::memcpy(copy.data() + second, &e, sizeof(e));
    return parse_record(copy.data(), n, 1, 2, &p);
  };
  EXPECT_EQ(mutated([](RecordHeader&, RecordEntry&) {}), "");
  EXPECT_NE(mutated([](RecordHeader&, RecordEntry& e) { e.label_bytes += 1; }), "");
  EXPECT_NE(mutated([](RecordHeader&, RecordEntry& e) { e.label_offset = 8; }), "");
  EXPECT_NE(mutated([](RecordHeader&, RecordEntry& e) { e.label_offset = 0xfffffff0u; }), "");
  EXPECT_NE(mutated([](RecordHeader&, RecordEntry& e) { e.label_bytes = 0xffff; }), "");
  EXPECT_NE(mutated([](RecordHeader&, RecordEntry& e) { e.reserved = 1; }), "");
  EXPECT_NE(mutated([](RecordHeader& h, RecordEntry&) { h.label_bytes = 1 << 20; }), "");
  EXPECT_NE(mutated([](RecordHeader& h, RecordEntry&) { h.label_bytes -= 1; }), "");
  EXPECT_NE(mutated([](RecordHeader& h, RecordEntry&) { h.flags = 2; }), "");  // unknown flag
  // Sent ahead: only with exactly one announcement (this record has two).
  EXPECT_NE(mutated([](RecordHeader& h, RecordEntry&) { h.flags = kRecordSentAhead; }), "");
}

// Two ranks wait in different collectives: each sees what every rank waits
// in, whole; a rank that times out after the other gave up still names what
// the other waited in.
TEST(Negotiator, EveryRankSeesWhatEachRankWaitsIn) {
  const std::string a = "allreduce a" + std::string(60, 'x') + "/PytfcommAllReduce #0";
  const std::string b = "allreduce b" + std::string(60, 'x') + "/PytfcommAllReduce #0";
  auto pa = make(1, 0, 1024, a.c_str()), pb = make(2, 0, 1024, b.c_str());
  Negotiator n0(0, 2), n1(1, 2);
  n0.announce(pa.get());
  n1.announce(pb.get());
  Round round1 = build_round(1, {{pa.get()}, {pb.get()}});
  for (Negotiator* neg : {&n0, &n1}) {
    neg->absorb(1, round1.parsed);
    EXPECT_TRUE(neg->decide().empty());
    const std::string text = neg->describe_waits();
    EXPECT_NE(text.find("rank 0 waits in '" + a + "' (allreduce(float32 x 1024"), std::string::npos)
        << text;
    EXPECT_NE(text.find("rank 1 waits in '" + b + "' (allreduce(float32 x 1024"), std::string::npos)
        << text;
    EXPECT_NE(text.find("The ranks call different collectives"), std::string::npos) << text;
  }
  // Rank 1 gives up first; rank 0's own timeout, a round later, still names b.
  n1.withdraw({2, 0});
  Round round2 = build_round(2, {{}, {}}, {{}, {{2, 0}}});
  n0.absorb(2, round2.parsed);
  n1.absorb(2, round2.parsed);
  const std::string unmatched = n0.describe_unmatched({1, 0});
  EXPECT_NE(unmatched.find("rank 1 asked for '" + b + "'"), std::string::npos) << unmatched;
  EXPECT_NE(unmatched.find("gave up on it"), std::string::npos) << unmatched;
  // Now rank 1 asks for nothing: rank 0 waits on a rank that is late.
  const std::string late = n0.describe_waits();
  EXPECT_NE(late.find("rank 1 asks for no collective"), std::string::npos) << late;
  EXPECT_NE(late.find("rank 0 waits in '" + a + "'"), std::string::npos) << late;
}

// Rank 1 skipped a call of stream 9 (rank 0 gave up on its #0): rank 0 asks
// for #1, rank 1 for #0. Every rank fails its call with the reason in that
// round, and every rank numbers its next call #2.
TEST(Negotiator, RanksOutOfStepFailTheirCallsAndAgreeOnTheNextNumber) {
  const int n = 2;
  auto p0 = make(9, 1, 10, "allreduce #1 of T"), p1 = make(9, 0, 10, "allreduce #0 of T");
  Negotiator n0(0, n), n1(1, n);
  n0.announce(p0.get());
  n1.announce(p1.get());
  Round round = build_round(1, {{p0.get()}, {p1.get()}});
  for (Negotiator* g : {&n0, &n1}) {
    g->absorb(1, round.parsed);
    auto ds = g->decide();
    ASSERT_EQ(ds.size(), 1u);
    EXPECT_EQ(ds[0].mine, g == &n0 ? p0.get() : p1.get());
    EXPECT_NE(ds[0].mismatch.find("out of step"), std::string::npos) << ds[0].mismatch;
    EXPECT_NE(ds[0].mismatch.find("rank 0 'allreduce #1 of T'; rank 1 'allreduce #0 of T'"),
              std::string::npos)
        << ds[0].mismatch;
    EXPECT_NE(ds[0].mismatch.find("#2"), std::string::npos) << ds[0].mismatch;
    ASSERT_EQ(g->resyncs().size(), 1u);
    EXPECT_EQ(g->resyncs()[0].stream, 9u);
    EXPECT_EQ(g->resyncs()[0].next, 2u);
    EXPECT_TRUE(g->mine().empty());
    EXPECT_TRUE(g->tables_empty());
  }
}

// Not out of step: a rank that has announced nothing on the stream yet (it
// may be late with the same number), and calls in flight on one stream that
// ranks announce in different rounds.
TEST(Negotiator, LateRanksAndCallsInFlightAreNotOutOfStep) {
  const int n = 3;
  std::vector<std::vector<std::unique_ptr<Request>>> reqs(n);
  for (int r = 0; r < n; ++r) {
    for (uint64_t s = 0; s < 3; ++s) reqs[r].push_back(make(4, s, 10));
  }
  std::vector<Negotiator> neg;
  for (int r = 0; r < n; ++r) neg.emplace_back(r, n);
  auto announce = [&](int r, std::vector<int> which) {
    std::vector<Request*> out;
    for (int i : which) {
      out.push_back(reqs[r][i].get());
      neg[r].announce(reqs[r][i].get());
    }
    return out;
  };
  // Round 1: rank 0 has #0-#2 in flight, rank 1 #0, rank 2 nothing yet.
  Round r1 = build_round(1, {announce(0, {0, 1, 2}), announce(1, {0}), {}});
  // Round 2: rank 1 #1, rank 2 #0 and #1.
  Round r2 = build_round(2, {{}, announce(1, {1}), announce(2, {0, 1})});
  // Round 3: ranks 1 and 2 #2.
  Round r3 = build_round(3, {{}, announce(1, {2}), announce(2, {2})});
  for (int r = 0; r < n; ++r) {
    neg[r].absorb(1, r1.parsed);
    EXPECT_TRUE(neg[r].decide().empty()) << r;
    EXPECT_TRUE(neg[r].resyncs().empty()) << r;
    neg[r].absorb(2, r2.parsed);
    std::vector<CollectiveKey> decided;
    for (auto& d : neg[r].decide()) {
      EXPECT_EQ(d.mismatch, "") << r;
      decided.push_back(d.key);
    }
    EXPECT_EQ(decided, (std::vector<CollectiveKey>{{4, 0}, {4, 1}})) << r;
    EXPECT_TRUE(neg[r].resyncs().empty()) << r;
    neg[r].absorb(3, r3.parsed);
    auto ds = neg[r].decide();
    ASSERT_EQ(ds.size(), 1u) << r;
    EXPECT_EQ(ds[0].mismatch, "") << r;
    EXPECT_TRUE(neg[r].tables_empty()) << r;
  }
}

// Rank 0 gave up on #0 (a withdrawal) that rank 1 never made; rank 1's next
// call is #0, rank 0's #1: out of step as soon as both are announced, in
// the same round on every rank (three ranks: ranks 0 and 2 alike).
TEST(Negotiator, ACallWithdrawnOnOneSideLeavesTheNextCallsOutOfStep) {
  const int n = 3;
  auto a0 = make(6, 0, 10), a2 = make(6, 0, 10);  // ranks 0 and 2: #0, given up
  auto b0 = make(6, 1, 10), b2 = make(6, 1, 10);  // their next call
  auto b1 = make(6, 0, 10);                       // rank 1's next call
  std::vector<Negotiator> neg;
  for (int r = 0; r < n; ++r) neg.emplace_back(r, n);
  neg[0].announce(a0.get());
  neg[2].announce(a2.get());
  Round r1 = build_round(1, {{a0.get()}, {}, {a2.get()}});
  neg[0].withdraw({6, 0});
  neg[2].withdraw({6, 0});
  Round r2 = build_round(2, {{}, {}, {}}, {{{6, 0}}, {}, {{6, 0}}});
  neg[0].announce(b0.get());
  neg[2].announce(b2.get());
  Round r3 = build_round(3, {{b0.get()}, {}, {b2.get()}});
  neg[1].announce(b1.get());
  Round r4 = build_round(4, {{}, {b1.get()}, {}});
  for (int r = 0; r < n; ++r) {
    for (auto* rd : {&r1, &r2, &r3}) {
      neg[r].absorb(rd == &r1 ? 1 : rd == &r2 ? 2 : 3, rd->parsed);
      EXPECT_TRUE(neg[r].decide().empty()) << r;
      EXPECT_TRUE(neg[r].resyncs().empty()) << r;
    }
    neg[r].absorb(4, r4.parsed);
    auto ds = neg[r].decide();
    ASSERT_EQ(ds.size(), 1u) << r;
    EXPECT_NE(ds[0].mismatch.find("out of step"), std::string::npos) << ds[0].mismatch;
    EXPECT_NE(ds[0].mismatch.find("ranks 0, 2 'x'; rank 1 'x'"), std::string::npos)
        << ds[0].mismatch;
    ASSERT_EQ(neg[r].resyncs().size(), 1u);
    EXPECT_EQ(neg[r].resyncs()[0].next, 2u);
    EXPECT_TRUE(neg[r].tables_empty()) << r;
  }
}

}  // namespace
}  // namespace pytfcomm
