// Completion of asynchronous GPU work for callers that must not wait: the
// GPU kernels of the TF op library enqueue a collective on TensorFlow's CUDA
// stream and return; a watch registered here calls the kernel's done() once
// a CUDA event recorded after that work has completed, or fails it when
// NCCL reports an error or the deadline passes. One background thread polls
// every watch (CUDA has no event wait with a timeout and a TF thread must
// never block); it spins briefly, then sleeps in short ticks, and sleeps on a
// condition variable while nothing is watched.
#pragma once

#include <functional>

namespace pytfcomm::gpu {

// `poll` is called from the poller thread until it returns true (finished:
// it has called its own completion callback). It must not throw, and must
// not block for long: every other watch waits meanwhile.
void watch(std::function<bool()> poll);

}  // namespace pytfcomm::gpu
