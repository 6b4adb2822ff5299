// How a wait spends its time before it blocks (transport/host/wait_policy.h,
// docs/transports.md "Waiting"): what auto picks per transport and per
// oversubscription, and that the PYTFCOMM_* knobs override it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <thread>
#include <utility>
#include <vector>

#include "common/param.h"
#include "transport/host/wait_policy.h"

namespace pytfcomm::host {
namespace {

// Sets variables, reloads the registry, and on exit unsets them and reloads
// again, so that later tests in this process see the defaults.
class Knobs {
 public:
  explicit Knobs(std::initializer_list<std::pair<const char*, const char*>> vars) : vars_(vars) {
    for (const auto& [name, value] : vars_) setenv(name, value, 1);
    reload_params();
  }
  ~Knobs() {
    for (const auto& [name, value] : vars_) unsetenv(name);
    reload_params();
  }

 private:
  std::vector<std::pair<const char*, const char*>> vars_;
};

int cores() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

TEST(WaitPolicy, AutoPollsBrieflyOverTcpAndLongerOverSharedMemory) {
  Knobs none({});
  const WaitPolicy tcp = choose_wait_policy(1, 2, false);
  EXPECT_EQ(tcp.spin_us, 50);
  EXPECT_TRUE(tcp.yield_cpu);
  EXPECT_FALSE(tcp.oversubscribed);
  // Every rank on one host with a core of its own: poll 1 ms, never yield.
  const WaitPolicy shm = choose_wait_policy(1, 1, true);
  EXPECT_EQ(shm.spin_us, 1000);
  EXPECT_FALSE(shm.yield_cpu);
}

TEST(WaitPolicy, RanksOutnumberingCoresYieldAndPollTheYieldSpin) {
  const int over = cores() + 1;
  {
    Knobs none({});
    const WaitPolicy tcp = choose_wait_policy(over, 1, false);
    EXPECT_TRUE(tcp.oversubscribed);
    EXPECT_TRUE(tcp.yield_cpu);
    EXPECT_EQ(tcp.spin_us, 50);  // PYTFCOMM_YIELD_SPIN_US's default (round15)
    const WaitPolicy shm = choose_wait_policy(over, 1, true);
    EXPECT_TRUE(shm.yield_cpu);  // the peer we wait for may need this core
    EXPECT_EQ(shm.spin_us, 1000);
  }
  Knobs ys({{"PYTFCOMM_YIELD_SPIN_US", "300"}});
  EXPECT_EQ(choose_wait_policy(over, 1, false).spin_us, 300);
  EXPECT_EQ(choose_wait_policy(1, 1, false).spin_us, 50);      // only when oversubscribed
  EXPECT_EQ(choose_wait_policy(over, 1, true).spin_us, 1000);  // shared memory polls longer
}

TEST(WaitPolicy, ExplicitKnobsWin) {
  const int over = cores() + 1;
  {
    Knobs spin({{"PYTFCOMM_SPIN_US", "7"}});
    for (bool shm : {false, true}) {
      EXPECT_EQ(choose_wait_policy(1, 1, shm).spin_us, 7) << shm;
      EXPECT_EQ(choose_wait_policy(over, 1, shm).spin_us, 7) << shm;
    }
  }
  {
    Knobs no_yield({{"PYTFCOMM_NO_YIELD", "0"}});  // set at all counts
    EXPECT_FALSE(choose_wait_policy(over, 1, false).yield_cpu);
    EXPECT_FALSE(choose_wait_policy(1, 2, false).yield_cpu);
  }
  Knobs force({{"PYTFCOMM_YIELD", "1"}});
  EXPECT_TRUE(choose_wait_policy(1, 1, true).yield_cpu);
}

}  // namespace
}  // namespace pytfcomm::host
