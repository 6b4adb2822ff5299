// A GPU collective's NCCL work, enqueued on its members' streams: the
// collective itself, then what NCCL does not do (mean: a sum and one
// division kernel, with pytfcomm's rounding; bool: reduced as bytes, then
// normalised to 0/1). Nothing here waits for the GPU: gpu/completion.h does.
// Written against the clique's interface only (gpu/clique.h).
#pragma once

#include <functional>

#include "common/clock.h"
#include "gpu/clique.h"
#include "gpu/gpu_call.h"

namespace pytfcomm::gpu {

// The NCCL communicators a collective runs on (from Clique::world and,
// for the hierarchical all-reduce, Clique::hierarchy).
struct NcclRoute {
  NcclClique* world = nullptr;
  Clique::Levels levels{};  // set (local != null): hierarchical all-reduce
  bool hierarchical() const { return levels.local != nullptr; }
};

// What a blocking launch runs while it is inside NCCL (engine/external.h's
// keep_alive: the host side's liveness; may be empty).
using KeepAlive = std::function<void()>;

void enqueue_nccl(Group& g, Clique& clique, const NcclRoute& route, TimePoint deadline,
                  const KeepAlive& keep_alive);

// Reduce-scatter within the host, all-reduce across hosts, all-gather
// within the host, plus a plain all-reduce of the count % local_size tail
// (NCCL's reduce-scatter takes equal parts). One member, one tensor.
void enqueue_hierarchical(const Member& m, const StreamTensor& t, ReduceOp op,
                          const NcclRoute& route, TimePoint deadline, const KeepAlive& keep_alive);

}  // namespace pytfcomm::gpu
