// Internal to gpu/stream_collectives.cc and gpu/stream_launch.cc: one
// GPU collective as the executor thread runs it (a group of members, one
// per local GPU), and the two ways of running it.
#pragma once

#include <cuda.h>

#include <memory>
#include <vector>

#include "common/clock.h"
#include "gpu/clique.h"
#include "gpu/stream_collectives.h"

namespace pytfcomm::gpu {

struct Member {
  CUstream stream = nullptr;
  CUcontext ctx = nullptr;
  int device = -1;
  std::vector<StreamTensor> tensors;
  StreamDone done;  // empty once handed on
};

// A collective's members; with one member for ungrouped ops.
struct Group {
  StreamCall call;
  std::vector<Member> members;  // by group rank
  int arrived = 0;
  TimePoint deadline;   // of the rendezvous
  bool closed = false;  // launched or failed: its rendezvous watch stops
};

// "GPU all-reduce" etc., for messages.
const char* op_label(StreamOp op);

// Calls m.done(e) unless it was handed on already.
void finish(Member& m, std::exception_ptr e);

// Enqueue the group on its members' streams (NCCL) or stage it through
// host memory; both end with complete_after() for every member. Throw on
// failure before any member was handed on.
void run_nccl(Group& g, const std::shared_ptr<Clique>& clique, TimePoint deadline);
void run_staged(Group& g, const std::shared_ptr<Clique>& clique, TimePoint deadline);

}  // namespace pytfcomm::gpu
