#include "gpu/gpu_params.h"

#include <string>

#include "common/param.h"

namespace pytfcomm::gpu {
namespace {

// The registry checked the values (common/param_table.def).
GpuParams load() {
  GpuParams p;
  const std::string t = read_param(ParamId::gpu_transport).text;
  p.transport = t == "nccl" ? Backend::kNccl : t == "staged" ? Backend::kStaged : Backend::kAuto;
  p.stage_bytes = read_param(ParamId::gpu_stage_bytes).integer;
  p.verify = read_param(ParamId::gpu_verify).flag;
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

const GpuParams& gpu_params() {
  static const GpuParams p = load();
  return p;
}

std::vector<std::pair<std::string, std::string>> describe_gpu_params() {
  const GpuParams& p = gpu_params();
  return {{"PYTFCOMM_GPU_TRANSPORT", backend_name(p.transport)},
          {"PYTFCOMM_GPU_STAGE_BYTES", std::to_string(p.stage_bytes)},
          {"PYTFCOMM_GPU_VERIFY", p.verify ? "1" : "0"}};
}

}  // namespace pytfcomm::gpu
