// How a wait spends its time before it blocks (docs/transports.md, Waiting):
// chosen once at setup from where the ranks are and what they share.
#pragma once

#include <cstdint>

namespace pytfcomm::host {

struct WaitPolicy {
  int64_t spin_us = 0;          // how long to poll before blocking
  bool yield_cpu = false;       // give the core away between polls
  bool oversubscribed = false;  // this host has more ranks than cores
};

// Whether this host runs more ranks (local_ranks, this one included) than it
// has cores: the one test for "ranks outnumber cores" everywhere.
bool ranks_outnumber_cores(int local_ranks);

// local_ranks: ranks on this host (this one included); shared_memory: some
// peer is reached through shared memory.
WaitPolicy choose_wait_policy(int local_ranks, int num_hosts, bool shared_memory);

}  // namespace pytfcomm::host
