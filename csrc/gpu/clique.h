// The NCCL communicators of the grouped GPU collectives that the TF op
// library runs (gpu/stream_collectives.h): one communicator per local GPU
// of the group, all in one NCCL clique that spans the processes of a
// pytfcomm Communicator (NCCL rank = process rank * group size + index in
// the group). A MirroredStrategy step on G local GPUs and P workers is
// therefore one NCCL collective over G*P ranks; NCCL picks its own rings
// and trees across NVLink, PCIe and the network.
//
// Bootstrapped through the pytfcomm Communicator (TCP, authenticated):
// every process says whether it can load NCCL and how many GPUs it
// groups, and rank 0's ncclUniqueId travels over it. When a process lacks
// NCCL (or PYTFCOMM_GPU_TRANSPORT=staged) the clique has no NCCL at all and
// its collectives are staged through pinned host memory and the CPU path.
//
// Communicators are non-blocking (ncclConfig_t.blocking = 0), as in
// gpu/nccl_comms.h: nothing waits inside NCCL, launches settle by polling,
// and fail() (from any thread: the poller at a deadline) aborts them. A
// mutex covers each NCCL call, never a wait, so an abort cannot free a
// communicator under a launch.
#pragma once

#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/error.h"
#include "engine/communicator.h"
#include "gpu/device.h"

namespace pytfcomm::gpu {

class Clique {
 public:
  // Collective over `comm` (null: this process only). `devices` are CUDA
  // ordinals in group order. Throws kConfig (e.g. processes group different
  // numbers of GPUs), kTimeout or kPeerLost.
  Clique(std::shared_ptr<Communicator> comm, const std::vector<int>& devices, TimePoint deadline);
  ~Clique();
  Clique(const Clique&) = delete;
  Clique& operator=(const Clique&) = delete;

  bool has_nccl() const { return !comms_.empty(); }
  int group_size() const { return static_cast<int>(devices_.size()); }
  int processes() const { return comm_ ? comm_->size() : 1; }
  int process_rank() const { return comm_ ? comm_->rank() : 0; }
  Communicator* comm() const { return comm_.get(); }
  Device& device(int member) { return *devices_[static_cast<size_t>(member)]; }

  // Runs enqueue(comms) between ncclGroupStart and ncclGroupEnd (it returns
  // the first failing result), then polls until NCCL accepted every call.
  // Nothing waits for the GPU. Throws (after fail()) on any NCCL error.
  void launch(const char* what, const std::function<ncclResult_t(const ncclComm_t*)>& enqueue,
              TimePoint deadline);

  // Throws the earlier failure (kClosed), or NCCL's asynchronous error after
  // failing the clique. Cheap; the poller calls it on every tick.
  void check(const char* what);

  // Aborts NCCL and closes the pytfcomm communicator (its peers notice at
  // once), remembering `why` for later calls. Never throws; idempotent.
  void fail(const std::string& why) noexcept;
  bool failed() const { return failed_.load(); }

 private:
  void settle(size_t i, ncclResult_t r, const char* what, TimePoint deadline);
  void abort_locked() noexcept;
  [[noreturn]] void raise(ncclComm_t comm, ncclResult_t r, const char* what);

  std::shared_ptr<Communicator> comm_;
  std::vector<std::unique_ptr<Device>> devices_;
  std::vector<ncclComm_t> comms_;  // empty: staged
  std::mutex mu_;                  // held for each NCCL call
  std::atomic<bool> failed_{false};
  std::string failure_;  // written once, before failed_ is set
};

// The clique of communicator `handle` (0: none) over `devices`, created on
// first use. Call it only where blocking is allowed (an executor thread).
std::shared_ptr<Clique> find_clique(int64_t handle, const std::shared_ptr<Communicator>& comm,
                                    const std::vector<int>& devices, TimePoint deadline);

// An Error of `kind` as an exception_ptr, for completion callbacks.
std::exception_ptr error_ptr(ErrorKind kind, const std::string& msg);

}  // namespace pytfcomm::gpu
