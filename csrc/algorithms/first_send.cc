// The first message of the pairwise all-reduces (algorithms.h), which the
// engine may send ahead of the data phase: the one place that says what it
// is, for the engine and for the algorithms that skip or take it.
#include "algorithms/algorithms.h"

namespace pytfcomm::algorithms {

FirstSend first_send(Phase phase, const Group& g, size_t count) {
  FirstSend f;
  const int n = g.size();
  if (n < 2 || (n & (n - 1)) != 0) return f;  // a fold comes first (fold.h)
  const int partner = g.me ^ 1;
  if (phase == Phase::kRecursiveDoubling) {
    f = {g.global(partner), 0, count};
  } else if (phase == Phase::kHalvingDoubling) {
    // The lower member keeps the lower half and gives the upper one.
    const size_t half = count / 2;
    f = g.me < partner ? FirstSend{g.global(partner), half, count - half}
                       : FirstSend{g.global(partner), 0, half};
  }
  return f;
}

}  // namespace pytfcomm::algorithms
