#include "gpu/verify_cache.h"

#include <cstring>

#include "common/error.h"
#include "gpu/check.h"
#include "gpu/clique.h"
#include "gpu/completion.h"
#include "gpu/cuda_driver.h"
#include "gpu/device.h"
#include "gpu/gpu_call.h"
#include "gpu/nccl_clique.h"
#include "gpu/nccl_lib.h"

namespace pytfcomm::gpu {
namespace {

constexpr size_t kWords = 4;  // key, ~key, not cached here, reserved

}  // namespace

uint64_t call_key(const Group& g) { return call_fields<uint64_t>(g).value(); }

VerifyCache::~VerifyCache() {
  if (ctx_ == nullptr) return;
  const CudaDriver& d = driver();
  ScopedContext scope(ctx_);
  if (dev_ != 0) d.cuMemFree_v2(dev_);
  if (host_ != nullptr) d.cuMemFreeHost(host_);
}

bool VerifyCache::confirm(uint64_t key, Clique& clique, NcclClique& world, const Member& m,
                          TimePoint deadline, const std::function<void()>& keep_alive) {
  const CudaDriver& d = driver();
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cached = keys_.count(key) != 0;
  }
  ScopedContext scope(m.ctx);
  if (ctx_ == nullptr) {
    void* h = nullptr;
    PTC_CU_CHECK(d.cuMemHostAlloc(&h, kWords * sizeof(uint64_t), 0));
    host_ = static_cast<uint64_t*>(h);
    CUresult r = d.cuMemAlloc_v2(&dev_, kWords * sizeof(uint64_t));
    if (r != CUDA_SUCCESS) {
      d.cuMemFreeHost(host_);
      host_ = nullptr;
      PTC_CU_CHECK(r);
    }
    ctx_ = m.ctx;
  }
  // The previous call's copy back was waited for: host_ is free.
  const uint64_t mine[kWords] = {key, ~key, cached ? 0u : 1u, 0};
  std::memcpy(host_, mine, sizeof(mine));
  PTC_CU_CHECK(d.cuMemcpyHtoDAsync_v2(dev_, host_, sizeof(mine), m.stream));
  const NcclLib& lib = nccl();
  world.launch(
      "the GPU call's verification",
      [&](const ncclComm_t* comms) {
        auto* p = reinterpret_cast<void*>(dev_);
        return lib.ncclAllReduce(p, p, kWords, ncclUint64, ncclMax, comms[0],
                                 reinterpret_cast<cudaStream_t>(m.stream));
      },
      deadline, keep_alive);
  PTC_CU_CHECK(d.cuMemcpyDtoHAsync_v2(host_, dev_, sizeof(mine), m.stream));
  wait_member(m, &clique, deadline, "the GPU call's verification", keep_alive);
  uint64_t all[kWords];
  std::memcpy(all, host_, sizeof(all));
  // max(key) == key and max(~key) == ~key: every rank sent this key.
  const bool same = all[0] == key && all[1] == ~key;
  const bool everywhere = same && all[2] == 0;
  std::lock_guard<std::mutex> lock(mu_);
  (everywhere ? compact_ : full_) += 1;
  return everywhere;
}

void VerifyCache::remember(uint64_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!keys_.insert(key).second) return;
  order_.push_back(key);
  if (order_.size() > kCapacity) {
    keys_.erase(order_.front());
    order_.pop_front();
  }
}

uint64_t VerifyCache::compact_checks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return compact_;
}

uint64_t VerifyCache::full_rounds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return full_;
}

}  // namespace pytfcomm::gpu
