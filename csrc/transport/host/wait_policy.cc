#include "transport/host/wait_policy.h"

#include <algorithm>
#include <thread>

#include "common/param.h"

namespace pytfcomm::host {
namespace {

// Default polling windows before a wait blocks (PYTFCOMM_SPIN_US overrides):
// long enough to cover a loopback round trip, short enough that an idle rank
// stops using its core at once.
constexpr int64_t kBusySpinUs = 50;
constexpr int64_t kShmSpinUs = 1000;

}  // namespace

bool ranks_outnumber_cores(int local_ranks) {
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return static_cast<unsigned>(local_ranks) > cores;
}

WaitPolicy choose_wait_policy(int local_ranks, int num_hosts, bool shared_memory) {
  const Params& p = params();
  // Poll briefly, then block. Polls yield the core in between: on a shared
  // or oversubscribed machine the peer we wait for may need this very core,
  // and sched_yield costs next to nothing when nobody else is runnable.
  bool oversubscribed = ranks_outnumber_cores(local_ranks);
  int64_t spin = p.spin_us >= 0 ? p.spin_us : (oversubscribed ? p.yield_spin_us : kBusySpinUs);
  bool yield_cpu = !p.no_yield;
  // Waking a sleeping rank (futex, then an IPI to an idle vCPU) costs tens of
  // microseconds, far more than a shared-memory hop: poll longer before that.
  if (p.spin_us < 0 && shared_memory) spin = std::max(spin, kShmSpinUs);
  // Shared memory needs no kernel help to move bytes. When every rank is on
  // this host and has a core, poll without yielding: a yield hands the core
  // to an unrelated process for a whole time slice. When ranks outnumber
  // cores, keep yielding so the peer we wait for can run.
  if (shared_memory && num_hosts == 1 && !oversubscribed && !p.force_yield) {
    yield_cpu = false;
  }
  return {spin, yield_cpu, oversubscribed};
}

}  // namespace pytfcomm::host
