// All-reduce algorithms a caller may ask for (the engine picks for kAuto).
#pragma once

#include "common/code_table.h"

namespace pytfcomm {

// X(enumerator, wire value, name). Wire values travel in negotiation records
// and across the Python boundary: never renumber them.
#define PTC_ALGORITHMS(X)                                                         \
  X(kAuto, 0, "auto") /* by size and topology (Communicator::choose_allreduce) */ \
  X(kRing, 1, "ring")                                                             \
  X(kHierarchical, 2, "hierarchical")                                             \
  X(kRecursiveDoubling, 3, "recursive_doubling")                                  \
  X(kOneShot, 4, "oneshot")                                                       \
  X(kHalvingDoubling, 5, "halving_doubling")

enum class Algorithm { PTC_ALGORITHMS(PTC_CODE_ENUMERATOR) };
PTC_CODE_TABLE(Algorithm, PTC_ALGORITHMS);
static_assert(codes_are_dense<Algorithm>(), "wire values 0..kHalvingDoubling");

inline const char* algorithm_name(Algorithm a) { return code_name(a, "?"); }

}  // namespace pytfcomm
