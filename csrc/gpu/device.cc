#include "gpu/device.h"

#include <algorithm>
#include <thread>

#include "common/error.h"
#include "gpu/cuda_driver.h"
// Generated at build time by bin2c from kernels.cu's fatbin (cmake/cuda.cmake):
// static const unsigned long long ptc_kernels_fatbin[].
#include "kernels_fatbin.h"

namespace pytfcomm::gpu {

Device::Device(int ordinal) : ordinal_(ordinal) {
  const CudaDriver& d = driver();
  PTC_CHECK_ARG(ordinal >= 0 && ordinal < d.device_count, "the tensor is on cuda:", ordinal,
                " but this process sees ", d.device_count, " GPU(s) (check CUDA_VISIBLE_DEVICES)");
  PTC_CU_CHECK(d.cuDeviceGet(&dev_, ordinal));
  PTC_CU_CHECK(d.cuDevicePrimaryCtxRetain(&ctx_, dev_));
  ScopedContext scope(ctx_);
  PTC_CU_CHECK(d.cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
  PTC_CU_CHECK(d.cuStreamCreate(&copy_in_, CU_STREAM_NON_BLOCKING));
  PTC_CU_CHECK(d.cuModuleLoadData(&module_, ptc_kernels_fatbin));
  static const char* kDivide[] = {"ptc_divide_f16", "ptc_divide_bf16", "ptc_divide_f32",
                                  "ptc_divide_f64", "ptc_divide_i8",   "ptc_divide_u8",
                                  "ptc_divide_i32", "ptc_divide_i64"};
  for (int t = 0; t < static_cast<int>(DType::kBool); ++t) {
    PTC_CU_CHECK(d.cuModuleGetFunction(&divide_[t], module_, kDivide[t]));
  }
  PTC_CU_CHECK(d.cuModuleGetFunction(&bool_normalize_, module_, "ptc_bool_normalize"));
}

Device::~Device() {
  // Best effort: a failed or aborted job must still release what it can.
  const CudaDriver& d = driver();
  ScopedContext scope(ctx_);
  if (stream_) d.cuStreamDestroy_v2(stream_);
  if (copy_in_) d.cuStreamDestroy_v2(copy_in_);
  // The module stays loaded: unloading it needs every launch to have ended,
  // and an aborted collective cannot promise that.
  if (ctx_) d.cuDevicePrimaryCtxRelease_v2(dev_);
}

void Device::launch(CUfunction f, size_t count, void** args, CUstream s) {
  if (count == 0) return;
  constexpr unsigned kThreads = 256;
  // Grid-stride loops: a few waves are enough to saturate memory bandwidth.
  unsigned blocks =
      static_cast<unsigned>(std::min<size_t>((count + kThreads - 1) / kThreads, 4096));
  PTC_CU_CHECK(
      driver().cuLaunchKernel(f, blocks, 1, 1, kThreads, 1, 1, 0, s ? s : stream_, args, nullptr));
}

void Device::divide(CUdeviceptr p, size_t count, DType dtype, int64_t divisor, CUstream s) {
  PTC_ENFORCE(dtype != DType::kBool && static_cast<int>(dtype) < static_cast<int>(DType::kBool),
              "no divide kernel for ", dtype_name(dtype));
  unsigned long long n = count;
  long long dv = divisor;
  void* args[] = {&p, &n, &dv};
  launch(divide_[static_cast<int>(dtype)], count, args, s);
}

void Device::bool_normalize(CUdeviceptr p, size_t count, CUstream s) {
  unsigned long long n = count;
  void* args[] = {&p, &n};
  launch(bool_normalize_, count, args, s);
}

int Device::pointer_device(CUdeviceptr p) {
  const CudaDriver& d = driver();
  int ordinal = -1;
  CUresult r = d.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p);
  PTC_CHECK_ARG(r == CUDA_SUCCESS, "the tensor claims to be on a GPU but its pointer 0x", std::hex,
                static_cast<unsigned long long>(p), std::dec,
                " is not CUDA memory: ", cu_error_text(r));
  return ordinal;
}

ScopedContext::ScopedContext(CUcontext ctx) {
  const CudaDriver& d = driver();
  PTC_CU_CHECK(d.cuCtxGetCurrent(&prev_));
  if (prev_ != ctx) PTC_CU_CHECK(d.cuCtxSetCurrent(ctx));
}

ScopedContext::~ScopedContext() {
  CUcontext cur = nullptr;
  const CudaDriver& d = driver();
  if (d.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur != prev_) d.cuCtxSetCurrent(prev_);
}

Event::Event() { PTC_CU_CHECK(driver().cuEventCreate(&e_, CU_EVENT_DISABLE_TIMING)); }
Event::~Event() {
  if (e_) driver().cuEventDestroy_v2(e_);
}
void Event::record(CUstream s) { PTC_CU_CHECK(driver().cuEventRecord(e_, s)); }

void wait_event(CUevent event, TimePoint deadline, const char* what) {
  const CudaDriver& d = driver();
  auto start = Clock::now();
  for (;;) {
    CUresult r = d.cuEventQuery(event);
    if (r == CUDA_SUCCESS) return;
    if (r != CUDA_ERROR_NOT_READY) {
      PTC_THROW(kInternal, "CUDA failed while waiting for ", what, ": ", cu_error_text(r));
    }
    if (Clock::now() >= deadline) {
      PTC_THROW(kTimeout, "timed out waiting for the GPU (", what,
                "); raise PYTFCOMM_TIMEOUT or timeout= if the GPU is just busy");
    }
    poll_pause(start);
  }
}

void poll_pause(TimePoint since) {
  if (Clock::now() - since < std::chrono::microseconds(100)) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

}  // namespace pytfcomm::gpu
