// The GPU backend of one pytfcomm Communicator: its local GPUs (one per
// member of a group: a TF MirroredStrategy step runs one op per GPU; the
// DLPack path has one), the choice between NCCL and staging, and the NCCL
// communicators (gpu/nccl_clique.h), created on first use:
//   world: every GPU of every process (NCCL rank = process rank * GPUs +
//     index), so G GPUs x P processes is one NCCL collective over G*P ranks;
//   within the host and across hosts: for the hierarchical all-reduce (one
//     GPU per process).
// Bootstrapped through the Communicator (TCP, authenticated): every
// process says whether it can load NCCL and how many GPUs it groups, and
// the ncclUniqueIds travel over it. A failure anywhere fails the whole
// backend: NCCL is aborted and the Communicator closed (its peers notice
// at once), and every later call says why.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"
#include "engine/communicator.h"
#include "gpu/device.h"
#include "gpu/gpu_params.h"
#include "gpu/nccl_clique.h"
#include "gpu/nccl_reform.h"
#include "gpu/verify_cache.h"

namespace pytfcomm::gpu {

class Clique {
 public:
  // Not collective: binds the GPUs (CUDA ordinals, in group order). `comm`
  // null: this process only. `may_shrink` (the DLPack path, whose cliques
  // end with their communicator): a failed world communicator is kept for
  // the survivors' ncclCommShrink (gpu/nccl_reform.h) where NCCL has it,
  // and this clique's world is shrunk from the one its predecessor kept.
  Clique(std::shared_ptr<Communicator> comm, const std::vector<int>& devices,
         bool may_shrink = false);
  ~Clique();
  Clique(const Clique&) = delete;
  Clique& operator=(const Clique&) = delete;

  int group_size() const { return static_cast<int>(devices_.size()); }
  int processes() const { return comm_ ? comm_->size() : 1; }
  int process_rank() const { return comm_ ? comm_->rank() : 0; }
  Communicator* comm() const { return comm_.get(); }
  Device& device(int member) { return *devices_[static_cast<size_t>(member)]; }

  // How a call asking for `requested` runs: kNccl or kStaged. The first call
  // is collective (every process says whether it can use NCCL and how many
  // GPUs it groups, over a host collective tagged `tag`, the call's digest,
  // so that processes already calling different collectives fail with a
  // mismatch). kConfig when NCCL is asked for and missing somewhere, or the
  // processes group different numbers of GPUs.
  Backend backend(Backend requested, TimePoint deadline, uint32_t tag);

  // The NCCL communicators, created collectively on first use (bootstrap
  // collectives tagged `tag`). Call them before the collective that needs
  // them is handed to the engine: they use the Communicator. The world is
  // shrunk from the old one when plan_shrink says so (every process decides
  // from the facts all exchanged in backend()'s hello, and they agree on
  // the shrink's outcome before using it), else made from a fresh
  // ncclUniqueId.
  NcclClique& world(TimePoint deadline, uint32_t tag);
  struct Levels {
    NcclClique* local;  // the ranks of this host
    NcclClique* cross;  // the ranks with this local index on every host
    int local_rank, local_size;
  };
  Levels hierarchy(TimePoint deadline, uint32_t tag);

  // Throws the earlier failure (kClosed), or NCCL's asynchronous error
  // after fail(). Cheap; the poller calls it on every tick.
  void check(const char* what);
  // The same without fail() (only NCCL is aborted): for the thread that
  // drives the engine, where the Communicator cannot be closed.
  void poll_errors(const char* what);
  // Aborts the NCCL communicators only. Never throws.
  void abort_nccl(const std::string& why) noexcept;

  // Aborts NCCL and closes the Communicator, remembering `why` for later
  // calls. Never throws; idempotent. Not on the thread that drives the
  // Communicator's engine (closing waits for it).
  void fail(const std::string& why) noexcept;
  bool failed() const { return failed_.load(); }

  // The agreed calls of this backend (gpu/verify_cache.h): the DLPack path's.
  VerifyCache& verify_cache() { return verify_cache_; }

 private:
  std::vector<NcclClique*> nccl_cliques();
  std::vector<CUcontext> contexts() const;
  // The world shrunk from parent_ (null: re-create it); releases parent_.
  std::unique_ptr<NcclClique> shrink_world(TimePoint deadline, uint32_t tag);

  std::shared_ptr<Communicator> comm_;
  std::vector<std::unique_ptr<Device>> devices_;
  bool may_shrink_ = false;
  std::unique_ptr<Parked> parent_;  // the old world, taken in backend()
  std::vector<ReformFacts> facts_;  // every process's, from the hello
  int nccl_everywhere_ = -1;        // -1: not asked yet (the first backend() asks)
  std::string nccl_missing_;        // which processes lack NCCL, and why this one does
  mutable std::mutex mu_;           // the pointers below (the poller reads them)
  std::unique_ptr<NcclClique> world_, local_, cross_;
  VerifyCache verify_cache_;  // after devices_: freed before the contexts are released
  std::atomic<bool> failed_{false};
  std::string failure_;  // written once, before failed_ is set
};

// The backend of communicator `handle` (0: none) over `devices`, made on
// first use and kept for the life of the process (the TF kernels' path).
std::shared_ptr<Clique> find_clique(int64_t handle, const std::shared_ptr<Communicator>& comm,
                                    const std::vector<int>& devices);

}  // namespace pytfcomm::gpu
