// The cheap verification of a GPU collective agreed before (the DLPack
// path's NCCL calls; PYTFCOMM_GPU_VERIFY_CACHE).
//
// The first call of each description goes through the engine's round (the
// full record compared field by field: a MismatchError naming what differs);
// once it succeeded, every rank remembers the call's 64-bit key. Every later
// call first runs one compact check on the NCCL communicator itself: a
// 4-element uint64 max all-reduce of (key, ~key, "not cached here", 0). When
// every rank sent the same key and every rank had it cached, the collective
// launches at once; otherwise (a changed call on some rank, a description not
// yet agreed) every rank runs the full round, so a mismatch is a
// MismatchError on every rank as before. Every rank sees the same reduced
// values, so all take the same branch. The check is ordered like the
// launches: the DLPack path runs one call at a time per communicator
// (gpu/gpu_comm.h), in the same order on every rank.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <unordered_set>

#include "common/clock.h"

namespace pytfcomm::gpu {

class Clique;
class NcclClique;
struct Group;
struct Member;

// The call's key: call_fields (gpu/gpu_call.h) at 64 bits, the fields
// call_digest covers.
uint64_t call_key(const Group& g);

class VerifyCache {
 public:
  VerifyCache() = default;
  ~VerifyCache();  // frees its buffers in `ctx_`
  VerifyCache(const VerifyCache&) = delete;
  VerifyCache& operator=(const VerifyCache&) = delete;

  // Collective over `world`'s ranks: true when every rank has `key` cached
  // (launch without the round), false when the full round must run (on
  // every rank alike). Waits for `m`'s stream, running `keep_alive` (the
  // host side's liveness, engine/external.h) meanwhile; throws like a launch.
  bool confirm(uint64_t key, Clique& clique, NcclClique& world, const Member& m, TimePoint deadline,
               const std::function<void()>& keep_alive);
  // After a full round that succeeded (on every rank).
  void remember(uint64_t key);

  uint64_t compact_checks() const;  // calls confirmed by the compact check
  uint64_t full_rounds() const;     // calls that took the full round

  // The most keys kept; the oldest goes first (the same on every rank).
  static constexpr size_t kCapacity = 1024;

 private:
  mutable std::mutex mu_;
  std::unordered_set<uint64_t> keys_;
  std::deque<uint64_t> order_;
  uint64_t compact_ = 0, full_ = 0;
  CUcontext ctx_ = nullptr;
  CUdeviceptr dev_ = 0;       // 4 x uint64 on the GPU
  uint64_t* host_ = nullptr;  // 4 x uint64, pinned
};

}  // namespace pytfcomm::gpu
