// The TF kernels' GPU collectives without NCCL (a process lacks it, or
// PYTFCOMM_GPU_TRANSPORT=staged): whole tensors staged through pinned host
// memory (gpu/staging.h's pool, reused between steps): copies out on TF's
// streams, the CPU path's local combine and cross-process collective,
// copies back in, then done() per member (gpu/completion.h). It waits for
// the GPU on the calling thread (an executor thread, never a TF thread).
#pragma once

#include <memory>

#include "common/clock.h"
#include "gpu/clique.h"
#include "gpu/gpu_call.h"

namespace pytfcomm::gpu {

void run_staged(Group& g, const std::shared_ptr<Clique>& clique, TimePoint deadline);

}  // namespace pytfcomm::gpu
