// Whether the survivors of a lost rank shrink the old NCCL communicator
// (gpu/nccl_reform.h): the facts each process exchanges and the one
// decision every process makes from all of them. No CUDA or NCCL here (the
// C++ unit tests build it without them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pytfcomm::gpu {

// What each process tells the others about the old communicator it kept
// (exchanged with the first GPU collective's hello, gpu/clique.cc).
struct ReformFacts {
  uint8_t kept = 0;  // 1: an old communicator, shrinkable, is parked here
  uint8_t pad[3] = {};
  int32_t old_first_rank = -1;  // its first NCCL rank in the old communicator
  int32_t old_nranks = 0;       // the old communicator's size
  int32_t pad2 = 0;
  uint64_t token = 0;  // NcclClique::token(): which communicator it was
};
static_assert(sizeof(ReformFacts) == 24, "ReformFacts travels as bytes");

struct ShrinkPlan {
  bool shrink = false;
  std::vector<int> excluded;  // the old NCCL ranks left out, ascending
  std::string why_not;        // when !shrink, for the log
};

// From every process's facts (in new rank order), each with `group` GPUs:
// shrink when every process kept the same old communicator (token and
// size), their old first ranks are a multiple of `group`, strictly
// ascending (the launcher keeps the survivors' order), and fewer than the
// old ranks; the mapping old rank -> new rank that ncclCommShrink makes
// (survivors renumbered in order) is then checked against the new
// communicator's (process rank * group + GPU index). The same on every rank.
ShrinkPlan plan_shrink(const std::vector<ReformFacts>& all, int group);

}  // namespace pytfcomm::gpu
