// The survivors' NCCL communicator after a lost rank: shrunk from the old
// one (ncclCommShrink, NCCL 2.27+) when every member of the new membership
// kept the same old communicator and they are a subset of its ranks in
// their old order; otherwise a new one from a fresh ncclUniqueId
// (gpu/clique.h decides with plan_shrink, from facts every rank shares).
//
// An old communicator that failed with its handles kept (NcclClique::
// keep_on_abort) waits here, parked with its GPUs, from the close of its
// pytfcomm communicator to the first NCCL collective of the next one, which
// takes it (and shrinks it, or releases it). One per process: parking
// another releases the earlier one.
#pragma once

#include <memory>
#include <vector>

#include "gpu/device.h"
#include "gpu/nccl_clique.h"
#include "gpu/shrink_plan.h"

namespace pytfcomm::gpu {

// A failed communicator kept for a shrink, with the GPUs its handles use.
struct Parked {
  std::unique_ptr<NcclClique> clique;
  std::vector<std::unique_ptr<Device>> devices;  // released after the clique
  ~Parked();
};

// Parks `p` (releasing one parked earlier).
void park(std::unique_ptr<Parked> p);
// Takes the parked one (null if none).
std::unique_ptr<Parked> take_parked();

}  // namespace pytfcomm::gpu
