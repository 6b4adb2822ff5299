// Background executor: one FIFO queue and one thread per communicator, for
// work that may wait on other processes (cross-worker collectives started by
// the TF ops). A TF kernel enqueues and returns at once; the task calls the
// kernel's done() when it finishes, so no TF thread ever blocks on a peer,
// even with inter_op_parallelism_threads=1. FIFO order per communicator
// keeps the order in which this process issued its collectives.
#pragma once

#include <cstdint>
#include <functional>

namespace pytfcomm {

class Executor {
 public:
  // The executor of the communicator with `handle`, created on first use.
  // Executors live until the process exits.
  static Executor& for_communicator(int64_t handle);

  // Runs `task` on the executor thread after every task enqueued before it.
  // The task must not throw (catch and report through its own callback).
  virtual void enqueue(std::function<void()> task) = 0;

 protected:
  virtual ~Executor() = default;
};

}  // namespace pytfcomm
