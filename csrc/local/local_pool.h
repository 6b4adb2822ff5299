// A small process-wide worker pool for purely local, CPU-bound work (the
// in-process combine of N device replicas), PYTFCOMM_LOCAL_THREADS threads
// with the caller. Callers always take part in their own work, so a
// parallel_for finishes even when every pool thread is busy with another
// caller's work: nothing ever waits on a queue.
#pragma once

#include <cstddef>
#include <functional>

namespace pytfcomm {

// Runs fn(i) for every i in [0, n), spread over the pool and the caller;
// returns when all are done. fn must not throw (wrap it; see local_reduce.cc).
void parallel_for(size_t n, const std::function<void(size_t)>& fn);

}  // namespace pytfcomm
