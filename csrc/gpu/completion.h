// The end of a GPU collective that was enqueued on a member's stream: the
// same two ways for NCCL and staged work, the TF kernels' and the DLPack
// path's. Both watch the clique's NCCL errors and the deadline; at the
// deadline NCCL is aborted.
#pragma once

#include <functional>
#include <memory>

#include "common/clock.h"
#include "gpu/clique.h"
#include "gpu/gpu_call.h"

namespace pytfcomm::gpu {

// Returns once everything enqueued so far on m.stream has run; kTimeout at
// `deadline`, the NCCL error, or kInternal for a CUDA failure (NCCL is then
// aborted, the Communicator is left to the caller: this may run on the
// thread that drives the engine). `clique` may be null (no NCCL to watch);
// `keep_alive`, when set, runs every millisecond (engine/external.h).
void wait_member(const Member& m, Clique* clique, TimePoint deadline, const char* what,
                 const std::function<void()>& keep_alive = nullptr);

// Hands m.done to the poller (gpu/event_poller.h): done(null) once
// everything enqueued so far on m.stream has run; done(error) on an NCCL
// error or at the deadline (the clique fails: NCCL aborted, communicator
// closed). `keep` (pinned staging memory) lives until the GPU is done with it.
void complete_after(Member& m, const std::shared_ptr<Clique>& clique, TimePoint deadline,
                    const char* what, std::shared_ptr<char> keep = nullptr);

}  // namespace pytfcomm::gpu
