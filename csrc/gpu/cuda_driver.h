// The CUDA driver API, loaded at run time with dlopen("libcuda.so.1").
//
// The module never links libcuda or libcudart, so a CUDA build of pytfcomm
// imports (and runs its CPU paths) on machines without a GPU or a driver.
// The driver API is enough for everything the GPU paths need: contexts,
// streams, events, pinned memory, copies and launching the kernels that
// were compiled into a fatbin at build time (kernels.cu, loaded by
// device.cc). CUDA headers are used only for types and prototypes.
#pragma once

#include <cuda.h>

#include <string>

#include "gpu/check.h"  // PTC_CU_CHECK, for every call of the driver

namespace pytfcomm::gpu {

// Every driver entry point pytfcomm uses; the names are the exported
// (versioned) symbols.
#define PTC_CUDA_DRIVER_FUNCS(X)  \
  X(cuInit)                       \
  X(cuDriverGetVersion)           \
  X(cuGetErrorString)             \
  X(cuDeviceGetCount)             \
  X(cuDeviceGet)                  \
  X(cuDeviceGetName)              \
  X(cuDevicePrimaryCtxRetain)     \
  X(cuDevicePrimaryCtxRelease_v2) \
  X(cuCtxGetCurrent)              \
  X(cuCtxSetCurrent)              \
  X(cuCtxGetDevice)               \
  X(cuPointerGetAttribute)        \
  X(cuStreamCreate)               \
  X(cuStreamDestroy_v2)           \
  X(cuStreamQuery)                \
  X(cuStreamWaitEvent)            \
  X(cuStreamGetCtx)               \
  X(cuEventCreate)                \
  X(cuEventDestroy_v2)            \
  X(cuEventRecord)                \
  X(cuEventQuery)                 \
  X(cuMemAlloc_v2)                \
  X(cuMemFree_v2)                 \
  X(cuMemHostAlloc)               \
  X(cuMemFreeHost)                \
  X(cuMemcpyDtoHAsync_v2)         \
  X(cuMemcpyHtoDAsync_v2)         \
  X(cuMemcpyDtoDAsync_v2)         \
  X(cuModuleLoadData)             \
  X(cuModuleGetFunction)          \
  X(cuLaunchKernel)

struct CudaDriver {
#define PTC_DECLARE(name) decltype(&::name) name = nullptr;
  PTC_CUDA_DRIVER_FUNCS(PTC_DECLARE)
#undef PTC_DECLARE
  std::string path;  // where libcuda was found
  int version = 0;   // cuDriverGetVersion, e.g. 13000
  int device_count = 0;
};

// What loading found, for `python -m pytfcomm info`; never throws.
struct DriverStatus {
  bool loaded = false;  // libcuda found, every symbol resolved, cuInit succeeded
  std::string path;
  int version = 0;
  int device_count = 0;
  std::string error;  // why not, when !loaded (or no device)
};
DriverStatus driver_status();

// The loaded driver with at least one device. Throws a kConfig error that
// says what is missing (no driver, no device) and what to do.
const CudaDriver& driver();

// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)" for messages.
std::string cu_error_text(CUresult r);

}  // namespace pytfcomm::gpu
