// The kinds of collective (MessageMeta::kind on the wire): what a message
// belongs to, named in errors, stall warnings and the timeline.
#pragma once

#include <cstdint>

#include "common/code_table.h"

namespace pytfcomm {

// X(enumerator, wire value, name) of MessageMeta::kind; the names are for
// messages and labels. kNegotiate's value is transport::kNegotiationKind
// (algorithms/collective.h checks it).
#define PTC_COLLECTIVE_KINDS(X)                                                        \
  X(kAllreduce, 1, "allreduce")                                                        \
  X(kBroadcast, 2, "broadcast")                                                        \
  X(kAllgather, 3, "allgather")                                                        \
  X(kReduceScatter, 4, "reduce_scatter")                                               \
  X(kBarrier, 5, "barrier")                                                            \
  X(kNegotiate, 6, "negotiation round") /* not a collective: a negotiation's frames */ \
  X(kAllgatherv, 7, "allgatherv")                                                      \
  X(kAlltoallv, 8, "alltoallv")

enum class CollectiveKind : uint8_t { PTC_COLLECTIVE_KINDS(PTC_CODE_ENUMERATOR) };
PTC_CODE_TABLE(CollectiveKind, PTC_COLLECTIVE_KINDS);

// The kind's name ("collective" for a value that names none, e.g. from a
// peer that lies).
inline const char* kind_name(CollectiveKind k) { return code_name(k, "collective"); }

}  // namespace pytfcomm
