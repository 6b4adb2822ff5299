// The pairwise algorithms (recursive doubling, halving-doubling) run on a
// power of two p of members. With n not a power of two, the first 2(n-p)
// members fold in pairs first: the even one hands its data to its odd
// neighbour and waits for the result; the odd one reduces the pair and stands
// for both.
#pragma once

#include <cstddef>

#include "algorithms/collective.h"
#include "common/dtype.h"

namespace pytfcomm::algorithms {

struct Fold {
  int p = 1;                // members that take part in the pairwise steps
  int rem = 0;              // n - p: pairs folded
  int vme = -1;             // this member's index among the p; -1: it handed its data over
  bool holds_pair = false;  // an odd member of a pair: `out` holds the pair's reduction
  // Group index of the member with index v among the p.
  int real(int v) const { return v < rem ? 2 * v + 1 : v + rem; }
};

// Folds this member in. An even member of a pair sends `data` and returns with
// the whole result in `out` (vme -1: nothing left to do). An odd member
// reduces its partner's data with `data` (the lower member's first) into
// `out`, using workspace slot 2. `data` may equal `out`.
Fold fold_in(const Context& c, const Group& g, const transport::MessageMeta& meta, const void* data,
             void* out, size_t count, DType dt, ReduceOp op);

// The last step, after the pairwise ones: an odd member of a pair sends the
// result to its even partner.
void fold_out(const Context& c, const Group& g, const transport::MessageMeta& meta, const Fold& f,
              const void* out, size_t bytes);

}  // namespace pytfcomm::algorithms
