// What negotiation costs each rank per collective in the steady state (20
// identical all-reduces after a warm-up), at 16, 64 and 256 ranks, with the
// agreed cache (records confirm by slot) and without, in records and in the
// bundles of Bruck's all-gather (sent and received): the table of
// docs/negotiation.md ("Agreed collectives in the steady state") is this
// test's output (--gtest_filter=NegotiationCost.*).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "negotiation_sim.h"

namespace pytfcomm {
namespace {

using testing_util::NegotiationSim;

struct PerCall {
  double record_bytes, frames, frame_bytes, frame_bytes_in;
};

PerCall steady_state(int size, bool by_slot) {
  constexpr int kWarmUp = 5, kCalls = 20;
  constexpr uint64_t kStream = 0x747261696e;
  Descriptor d;
  d.kind = algorithms::CollectiveKind::kAllreduce;
  d.count = 1 << 20;  // 4 MiB of float32: no input rides in the record
  NegotiationSim sim(size, by_slot);
  auto call_all = [&] {
    for (int r = 0; r < size; ++r) {
      sim.call(r, kStream, d, "allreduce train_step/pytfcomm_allreduce/PytfcommAllReduce");
    }
    sim.round();
    for (int r = 0; r < size; ++r) {
      ASSERT_EQ(sim.decided(r).size(), 1u);
      EXPECT_EQ(sim.decided(r)[0].mismatch, "");
    }
  };
  for (int i = 0; i < kWarmUp; ++i) call_all();
  sim.reset_cost();
  for (int i = 0; i < kCalls; ++i) call_all();
  // Every rank alike in this steady state: rank 0 speaks for all (checked).
  for (int r = 1; r < size; ++r) {
    EXPECT_EQ(sim.cost(r).record_bytes, sim.cost(0).record_bytes);
    EXPECT_EQ(sim.cost(r).frame_bytes, sim.cost(0).frame_bytes);
    EXPECT_EQ(sim.cost(r).frame_bytes_in, sim.cost(0).frame_bytes_in);
  }
  const auto& c = sim.cost(0);
  EXPECT_EQ(c.frames_in, c.frames);
  return {double(c.record_bytes) / kCalls, double(c.frames) / kCalls,
          double(c.frame_bytes) / kCalls, double(c.frame_bytes_in) / kCalls};
}

TEST(NegotiationCost, SteadyStateBytesPerStepAreConstantInRanksWithTheCache) {
#ifdef PYTFCOMM_SANITIZED
  const std::vector<int> sizes = {16, 64};  // 256 threads under ASan: a minute for no new path
#else
  const std::vector<int> sizes = {16, 64, 256};
#endif
  std::vector<PerCall> off, on;
  for (int n : sizes) {
    off.push_back(steady_state(n, false));
    on.push_back(steady_state(n, true));
  }
  std::string table =
      "| ranks | cache | record bytes (sent, shared memory) | frames sent (TCP) | frame bytes sent "
      "(TCP) | frame bytes received (TCP) |\n|---|---|---|---|---|---|\n";
  for (size_t i = 0; i < sizes.size(); ++i) {
    for (int k = 0; k < 2; ++k) {
      const PerCall& p = k ? on[i] : off[i];
      char row[200];
      std::snprintf(row, sizeof(row), "| %d | %s | %.0f | %.0f | %.0f | %.0f |\n", sizes[i],
                    k ? "on" : "off", p.record_bytes, p.frames, p.frame_bytes, p.frame_bytes_in);
      table += row;
    }
  }
  std::printf("%s", table.c_str());
  for (size_t i = 0; i < sizes.size(); ++i) {
    // What a rank contributes is the same at any size, and smaller than in full.
    EXPECT_EQ(on[i].record_bytes, on[0].record_bytes) << sizes[i];
    EXPECT_EQ(on[i].record_bytes, 64.0) << sizes[i];
    EXPECT_LT(on[i].record_bytes, off[i].record_bytes) << sizes[i];
    EXPECT_LT(on[i].frame_bytes, off[i].frame_bytes) << sizes[i];
    // Messages: ceil(log2 N) frames per collective, with or without.
    EXPECT_EQ(on[i].frames, off[i].frames);
    // Identical records travel once per bundle: a frame's bytes, sent or
    // received, do not grow with N; only the number of steps does.
    EXPECT_EQ(on[i].frame_bytes / on[i].frames, on[0].frame_bytes / on[0].frames) << sizes[i];
    EXPECT_EQ(on[i].frame_bytes_in / on[i].frames, on[0].frame_bytes_in / on[0].frames) << sizes[i];
  }
  // 256 ranks: 8 steps where 16 take 4, so at most twice the bytes (64: 6 steps).
  EXPECT_LE(on.back().frame_bytes_in, 2 * on[0].frame_bytes_in + 64);
  EXPECT_LE(on.back().frame_bytes, 2 * on[0].frame_bytes + 64);
}

}  // namespace
}  // namespace pytfcomm
