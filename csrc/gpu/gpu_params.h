// Environment settings of the GPU paths, read once (like common/param.h).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace pytfcomm::gpu {

// How GPU tensors move (wire values of the bindings' `backend` argument).
enum class Backend { kAuto = 0, kNccl = 1, kStaged = 2 };
const char* backend_name(Backend b);

// PYTFCOMM_GPU_NCCL_MODE: how NCCL communicators wait (gpu/nccl_clique.h).
enum class NcclMode { kAuto = 0, kBlocking = 1, kNonBlocking = 2 };

struct GpuParams {
  Backend transport;    // PYTFCOMM_GPU_TRANSPORT: auto | nccl | staged
  int64_t stage_bytes;  // PYTFCOMM_GPU_STAGE_BYTES: each pinned staging buffer
  bool verify;          // PYTFCOMM_GPU_VERIFY: compare call metadata across ranks first
  bool verify_cache;    // PYTFCOMM_GPU_VERIFY_CACHE: agreed calls confirmed compactly
  NcclMode nccl_mode;   // PYTFCOMM_GPU_NCCL_MODE: auto | blocking | nonblocking
};

// Whether NCCL communicators are blocking: PYTFCOMM_GPU_NCCL_MODE against the
// loaded NCCL (ncclCommRevoke). Throws kConfig for `blocking` without it.
bool nccl_blocking();

// Parsed on first use; a malformed value throws kConfig naming it.
const GpuParams& gpu_params();
std::vector<std::pair<std::string, std::string>> describe_gpu_params();

}  // namespace pytfcomm::gpu
