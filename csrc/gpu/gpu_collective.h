// Running one GPU collective, for both callers: the TF kernels (members'
// done() called later) and the DLPack bindings (returns when complete).
//
// On NCCL it is the engine's collective like a CPU one: a request with the
// call's digest as shape tag is negotiated (a disagreement is a
// MismatchError on every rank before NCCL runs), runs in the order the
// ranks decided, under the engine's data deadline, and appears in the
// timeline ("algorithm": "nccl"); at its turn the engine calls the NCCL
// launch (engine/external.h). PYTFCOMM_GPU_VERIFY=0 skips the negotiation
// (no host round trip; the callers' order is trusted) and launches at once.
// Staged, it runs `staged` after a one-byte agreement over the host
// transport (its chunks are the engine's CPU collectives).
#pragma once

#include <functional>
#include <memory>

#include "common/clock.h"
#include "gpu/clique.h"
#include "gpu/gpu_call.h"

namespace pytfcomm::gpu {

enum class Completion {
  kCallbacks,  // every member's done() runs once its stream ran the collective
  kWait,       // returns once the outputs are complete
};

// Runs `g` on `clique`; returns the transport it used. Throws; unless
// keeps_ranks_in_step(), the clique failed first (NCCL aborted, the
// Communicator closed on every rank).
// `staged(deadline, digest)` is the staged body; `digest` is the call's
// (call_digest), for g.staged_carries_digest.
Backend run_collective(Group& g, const std::shared_ptr<Clique>& clique, Completion how,
                       const std::function<void(TimePoint deadline, uint32_t digest)>& staged);

// A bad argument, or ranks that disagree (found before any data moved):
// the backend and the Communicator stay usable.
bool keeps_ranks_in_step(const std::exception& e);

// The deadline of a call: its timeout_s, else its communicator's default
// (init's timeout), else PYTFCOMM_TIMEOUT.
TimePoint deadline_of(const StreamCall& c);

}  // namespace pytfcomm::gpu
