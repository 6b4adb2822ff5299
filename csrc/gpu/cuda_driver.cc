#include "gpu/cuda_driver.h"

#include <dlfcn.h>

#include <mutex>

#include "common/error.h"
#include "common/param.h"

namespace pytfcomm::gpu {
namespace {

struct Loaded {
  CudaDriver api;
  DriverStatus status;
};

// Loaded once per process; the handle is never closed (the driver keeps
// threads and state that outlive any object of ours).
const Loaded& load() {
  static const Loaded* loaded = [] {
    auto* l = new Loaded();
    // PYTFCOMM_CUDA_DRIVER names a library to use instead (tests, odd installs).
    const std::string name = read_param(ParamId::cuda_driver).text;
    void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* why = dlerror();
      l->status.error =
          str_cat("no CUDA driver: dlopen(", name, ") failed (", why ? why : "unknown reason",
                  "); install the NVIDIA driver or run on a machine with a GPU");
      return l;
    }
#define PTC_RESOLVE(fn)                                                                     \
  l->api.fn = reinterpret_cast<decltype(&::fn)>(dlsym(h, #fn));                             \
  if (l->api.fn == nullptr) {                                                               \
    l->status.error = str_cat("the CUDA driver in ", name, " lacks ", #fn,                  \
                              "; it is too old for this build (update the NVIDIA driver)"); \
    return l;                                                                               \
  }
    PTC_CUDA_DRIVER_FUNCS(PTC_RESOLVE)
#undef PTC_RESOLVE
    char path[4096] = {0};
    if (name.find('/') != std::string::npos) {
      l->api.path = name;  // already a path (PYTFCOMM_CUDA_DRIVER=/x/libcuda.so.1)
    } else if (dlinfo(h, RTLD_DI_ORIGIN, path) == 0) {
      l->api.path = str_cat(path, "/", name);
    } else {
      l->api.path = name;
    }
    l->status.path = l->api.path;
    l->api.cuDriverGetVersion(&l->api.version);
    l->status.version = l->api.version;
    CUresult r = l->api.cuInit(0);
    if (r != CUDA_SUCCESS) {
      const char* s = nullptr;
      l->api.cuGetErrorString(r, &s);
      l->status.error = str_cat("cuInit failed: ", s ? s : "unknown error",
                                r == CUDA_ERROR_NO_DEVICE ? " (no GPU visible: check "
                                                            "CUDA_VISIBLE_DEVICES and nvidia-smi)"
                                                          : "");
      return l;
    }
    l->api.cuDeviceGetCount(&l->api.device_count);
    l->status.device_count = l->api.device_count;
    l->status.loaded = true;
    if (l->api.device_count == 0) l->status.error = "the CUDA driver sees no GPU";
    return l;
  }();
  return *loaded;
}

}  // namespace

DriverStatus driver_status() { return load().status; }

const CudaDriver& driver() {
  const Loaded& l = load();
  if (!l.status.loaded || l.api.device_count == 0) {
    PTC_THROW(kConfig, "GPU tensors need CUDA, which is not usable here: ", l.status.error);
  }
  return l.api;
}

std::string cu_error_text(CUresult r) {
  const Loaded& l = load();
  const char* s = nullptr;
  if (l.api.cuGetErrorString) l.api.cuGetErrorString(r, &s);
  return str_cat("CUresult ", static_cast<int>(r), " (", s ? s : "unknown", ")");
}

}  // namespace pytfcomm::gpu
