#include "gpu/gpu_params.h"

#include <string>

#include "common/error.h"
#include "common/param.h"
#include "gpu/nccl_lib.h"

namespace pytfcomm::gpu {
namespace {

// The registry checked the values (common/param_table.def).
GpuParams load() {
  GpuParams p;
  const std::string t = read_param(ParamId::gpu_transport).text;
  p.transport = t == "nccl" ? Backend::kNccl : t == "staged" ? Backend::kStaged : Backend::kAuto;
  p.stage_bytes = read_param(ParamId::gpu_stage_bytes).integer;
  p.verify = read_param(ParamId::gpu_verify).flag;
  p.verify_cache = read_param(ParamId::gpu_verify_cache).flag;
  const std::string m = read_param(ParamId::gpu_nccl_mode).text;
  p.nccl_mode = m == "blocking"      ? NcclMode::kBlocking
                : m == "nonblocking" ? NcclMode::kNonBlocking
                                     : NcclMode::kAuto;
  return p;
}

}  // namespace

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::kAuto:
      return "auto";
    case Backend::kNccl:
      return "nccl";
    case Backend::kStaged:
      return "staged";
  }
  return "?";
}

bool nccl_blocking() {
  const NcclLib& lib = nccl();
  switch (gpu_params().nccl_mode) {
    case NcclMode::kNonBlocking:
      return false;
    case NcclMode::kBlocking:
      if (lib.ncclCommRevoke == nullptr) {
        PTC_THROW(kConfig,
                  "PYTFCOMM_GPU_NCCL_MODE=blocking needs ncclCommRevoke (NCCL 2.28+), "
                  "which NCCL ",
                  nccl_version_string(lib.version), " (", lib.path,
                  ") lacks; use auto or nonblocking, or a newer NCCL");
      }
      return true;
    case NcclMode::kAuto:
      break;
  }
  // auto: non-blocking. A blocking launch is bounded by the deadline only: its
  // watchdog does not yet revoke when the host side sees a peer lost, which the
  // non-blocking path reports within the liveness bound (docs/gpu.md).
  return false;
}

const GpuParams& gpu_params() {
  static const GpuParams p = load();
  return p;
}

std::vector<std::pair<std::string, std::string>> describe_gpu_params() {
  const GpuParams& p = gpu_params();
  return {{"PYTFCOMM_GPU_TRANSPORT", backend_name(p.transport)},
          {"PYTFCOMM_GPU_STAGE_BYTES", std::to_string(p.stage_bytes)},
          {"PYTFCOMM_GPU_VERIFY", p.verify ? "1" : "0"},
          {"PYTFCOMM_GPU_VERIFY_CACHE", p.verify_cache ? "1" : "0"},
          {"PYTFCOMM_GPU_NCCL_MODE", p.nccl_mode == NcclMode::kBlocking      ? "blocking"
                                     : p.nccl_mode == NcclMode::kNonBlocking ? "nonblocking"
                                                                             : "auto"}};
}

}  // namespace pytfcomm::gpu
