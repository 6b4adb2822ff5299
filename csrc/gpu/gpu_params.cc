#include "gpu/gpu_params.h"

#include <cerrno>
#include <cstdlib>
#include <string>

#include "common/error.h"

namespace pytfcomm::gpu {
namespace {

GpuParams load() {
  GpuParams p;
  const char* t = std::getenv("PYTFCOMM_GPU_TRANSPORT");
  std::string s = t && *t ? t : "auto";
  if (s == "auto") {
    p.transport = Backend::kAuto;
  } else if (s == "nccl") {
    p.transport = Backend::kNccl;
  } else if (s == "staged") {
    p.transport = Backend::kStaged;
  } else {
    PTC_THROW(kConfig, "PYTFCOMM_GPU_TRANSPORT='", s,
              "' is not valid: expected auto, nccl or staged; unset it to use the default auto");
  }
  p.stage_bytes = 4 << 20;
  if (const char* v = std::getenv("PYTFCOMM_GPU_STAGE_BYTES"); v && *v) {
    char* end = nullptr;
    errno = 0;
    long long x = std::strtoll(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || x < (64 << 10) || x > (1LL << 32)) {
      PTC_THROW(kConfig, "PYTFCOMM_GPU_STAGE_BYTES='", v,
                "' is not valid: expected an integer number of bytes in [65536, 2^32]; unset it "
                "to use the default 4194304");
    }
    p.stage_bytes = x;
  }
  const char* v = std::getenv("PYTFCOMM_GPU_VERIFY");
  std::string vs = v ? v : "1";
  if (vs != "0" && vs != "1") {
    PTC_THROW(kConfig, "PYTFCOMM_GPU_VERIFY='", vs, "' is not valid: expected 0 or 1");
  }
  p.verify = vs == "1";
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
