// A CPU stand-in for the CUDA driver (libcuda.so.1), for tests only.
//
// pytfcomm's CUDA build dlopen()s the driver (PYTFCOMM_CUDA_DRIVER); loading
// this library instead runs its GPU paths on host memory: "device memory" is
// host memory tracked in a registry, every stream is an ordered queue run by
// its own thread (so completion is truly asynchronous), events are points in
// those queues, and the kernels of csrc/gpu/kernels.cu run as CPU loops with
// the same arithmetic. What pytfcomm could depend on behaves as CUDA does;
// misuse fails as on a GPU (a device range outside every live allocation is
// CUDA_ERROR_ILLEGAL_ADDRESS, sticky on its stream, with one line on stderr).
//
// Files: driver.cc (this: init, devices, primary contexts, error strings),
// memory.cc (allocations, pointer attributes, copies), streams.cc (streams,
// events, ptcsi_stream_enqueue), kernels.cc (modules, functions, launches).
//
// Environment, read once at cuInit:
//   PTCSI_GPUS=N            stand-in GPUs in the machine (default 2).
//   CUDA_VISIBLE_DEVICES    as the real driver reads it: a comma list of
//                           indices; the first invalid entry (not a number,
//                           out of range, repeated) ends the list; set but
//                           empty means no device (cuInit: CUDA_ERROR_NO_DEVICE).
//   PTCSI_CUDA_FAIL_COPY=N  the N-th asynchronous copy of the process
//                           (1-based, all three directions counted in call
//                           order) fails with CUDA_ERROR_ILLEGAL_ADDRESS,
//                           sticky on its stream.
//   PTCSI_CUDA_DELAY_US=U   every stream work item (copy, kernel,
//                           ptcsi_stream_enqueue work) first sleeps U us,
//                           which exposes missing waits in the caller.
//
// Deliberate differences from a GPU: an error is sticky on its stream only
// (a real illegal address poisons the whole context), and a stream waiting
// on an event of a failed stream still proceeds. Host pointers given to
// copies are not validated (they are the caller's memory); pageable
// (non-cuMemHostAlloc) host memory follows CUDA's rules: an asynchronous
// copy from it has read it before returning, one into it has completed.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cuda/internal.h"

namespace ptcsi {
namespace {

struct Driver {
  std::once_flag once;
  // Set (after devices) by the one cuInit that initialises.
  std::atomic<CUresult> init_result{CUDA_ERROR_NOT_INITIALIZED};
  std::vector<Context*> devices;  // by visible ordinal; never freed
  unsigned delay_us = 0;
  uint64_t fail_copy = 0;
};

Driver& drv() {
  static auto* d = new Driver();  // never destroyed: stream threads may outlive exit
  return *d;
}

thread_local Context* tls_current = nullptr;

long env_number(const char* name, long fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 0) {
    std::fprintf(stderr, "ptcsi: ignoring %s=%s (not a non-negative integer)\n", name, v);
    return fallback;
  }
  return n;
}

// The physical indices CUDA_VISIBLE_DEVICES leaves visible, in its order.
std::vector<int> visible(int gpus) {
  std::vector<int> all;
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  if (v == nullptr) {
    for (int i = 0; i < gpus; ++i) all.push_back(i);
    return all;
  }
  std::string s(v);
  size_t at = 0;
  while (at <= s.size()) {
    size_t comma = s.find(',', at);
    std::string item = s.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    item = b == std::string::npos ? "" : item.substr(b, e - b + 1);
    char* end = nullptr;
    long n = item.empty() ? -1 : std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || n < 0 || n >= gpus) break;
    bool repeated = false;
    for (int p : all) repeated = repeated || p == n;
    if (repeated) break;
    all.push_back(static_cast<int>(n));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return all;
}

void initialize() {
  Driver& d = drv();
  d.delay_us = static_cast<unsigned>(env_number("PTCSI_CUDA_DELAY_US", 0));
  d.fail_copy = static_cast<uint64_t>(env_number("PTCSI_CUDA_FAIL_COPY", 0));
  std::vector<int> phys = visible(static_cast<int>(env_number("PTCSI_GPUS", 2)));
  for (size_t i = 0; i < phys.size(); ++i) {
    auto* c = new Context();
    c->ordinal = static_cast<int>(i);
    c->physical = phys[i];
    d.devices.push_back(c);
  }
  d.init_result = d.devices.empty() ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS;
}

struct ErrorText {
  CUresult code;
  const char* name;
  const char* text;
};

#define PTCSI_ERR(code, text) \
  { code, #code, text }
const ErrorText kErrors[] = {
    PTCSI_ERR(CUDA_SUCCESS, "no error"),
    PTCSI_ERR(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
    PTCSI_ERR(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
    PTCSI_ERR(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
    PTCSI_ERR(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
    PTCSI_ERR(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
    PTCSI_ERR(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
    PTCSI_ERR(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"),
    PTCSI_ERR(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
    PTCSI_ERR(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed"),
    PTCSI_ERR(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
    PTCSI_ERR(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
    PTCSI_ERR(CUDA_ERROR_NOT_READY, "device not ready"),
    PTCSI_ERR(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
    PTCSI_ERR(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch"),
    PTCSI_ERR(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"),
    PTCSI_ERR(CUDA_ERROR_ILLEGAL_INSTRUCTION, "an illegal instruction was encountered"),
    PTCSI_ERR(CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address"),
    PTCSI_ERR(CUDA_ERROR_NOT_PERMITTED, "operation not permitted"),
    PTCSI_ERR(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
    PTCSI_ERR(CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS"),
    PTCSI_ERR(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
              "peer access is not supported between these two devices"),
    PTCSI_ERR(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
              "pointer does not correspond to a registered memory region"),
    PTCSI_ERR(CUDA_ERROR_TIMEOUT, "wait operation timed out"),
    PTCSI_ERR(CUDA_ERROR_UNKNOWN, "unknown error"),
};
#undef PTCSI_ERR

const ErrorText* error_text(CUresult r) {
  for (const ErrorText& e : kErrors) {
    if (e.code == r) return &e;
  }
  return nullptr;
}

}  // namespace

std::mutex& mutex() {
  static auto* m = new std::mutex();
  return *m;
}

CUresult need_init() {
  return drv().init_result.load() == CUDA_SUCCESS ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

int device_count() { return static_cast<int>(drv().devices.size()); }

Context* find_context(CUcontext h) {
  for (Context* c : drv().devices) {
    if (reinterpret_cast<CUcontext>(c) == h) return c;
  }
  return nullptr;
}

Context* context_of_ordinal(int ordinal) {
  const auto& devs = drv().devices;
  return ordinal >= 0 && ordinal < static_cast<int>(devs.size()) ? devs[ordinal] : nullptr;
}

Context* current() { return tls_current; }

bool active(const Context* c) {
  std::lock_guard<std::mutex> lock(mutex());
  return c->refs > 0;
}

CUresult need_current(Context** out) {
  if (CUresult r = need_init()) return r;
  Context* c = tls_current;
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (!active(c)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *out = c;
  return CUDA_SUCCESS;
}

unsigned delay_us() { return drv().delay_us; }
uint64_t fail_copy_index() { return drv().fail_copy; }

}  // namespace ptcsi

using namespace ptcsi;

PTCSI_API CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::call_once(drv().once, initialize);
  return drv().init_result.load();
}

PTCSI_API CUresult cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = 13000;
  return CUDA_SUCCESS;
}

PTCSI_API CUresult cuGetErrorString(CUresult error, const char** str) {
  if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* e = error_text(error);
  *str = e ? e->text : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

PTCSI_API CUresult cuGetErrorName(CUresult error, const char** str) {
  if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* e = error_text(error);
  *str = e ? e->name : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

PTCSI_API CUresult cuDeviceGetCount(int* count) {
  if (CUresult r = need_init()) return r;
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = device_count();
  return CUDA_SUCCESS;
}

PTCSI_API CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (CUresult r = need_init()) return r;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (context_of_ordinal(ordinal) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;  // device handles are ordinals, as in the real driver
  return CUDA_SUCCESS;
}

PTCSI_API CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (CUresult r = need_init()) return r;
  Context* c = context_of_ordinal(dev);
  if (c == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(name, static_cast<size_t>(len), "pytfcomm CPU stand-in GPU %d", c->physical);
  return CUDA_SUCCESS;
}

PTCSI_API CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (CUresult r = need_init()) return r;
  Context* c = context_of_ordinal(dev);
  if (c == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(mutex());
  ++c->refs;
  *pctx = reinterpret_cast<CUcontext>(c);
  return CUDA_SUCCESS;
}

PTCSI_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  if (CUresult r = need_init()) return r;
  Context* c = context_of_ordinal(dev);
  if (c == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(mutex());
  if (c->refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  // At zero the context is inactive: using it is CUDA_ERROR_CONTEXT_IS_DESTROYED
  // until the next retain. (Its memory and streams are kept: a real driver
  // would free them, which no test wants to depend on.)
  --c->refs;
  return CUDA_SUCCESS;
}

PTCSI_API CUresult cuCtxGetCurrent(CUcontext* pctx) {
  if (CUresult r = need_init()) return r;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = reinterpret_cast<CUcontext>(tls_current);
  return CUDA_SUCCESS;
}

PTCSI_API CUresult cuCtxSetCurrent(CUcontext ctx) {
  if (CUresult r = need_init()) return r;
  if (ctx == nullptr) {
    tls_current = nullptr;
    return CUDA_SUCCESS;
  }
  Context* c = find_context(ctx);
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  tls_current = c;
  return CUDA_SUCCESS;
}

PTCSI_API CUresult cuCtxGetDevice(CUdevice* device) {
  Context* c = nullptr;
  if (CUresult r = need_current(&c)) return r;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *device = c->ordinal;
  return CUDA_SUCCESS;
}

PTCSI_API CUresult cuCtxSynchronize() {
  Context* c = nullptr;
  if (CUresult r = need_current(&c)) return r;
  return synchronize_context(c);
}
