// Memory of the CUDA driver stand-in (see driver.cc): device allocations
// (host memory in a registry), pinned host memory, pointer attributes and
// copies.
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "cuda/internal.h"

namespace ptcsi {
namespace {

struct Block {
  size_t size = 0;
  int ordinal = -1;  // -1: pinned host memory
  unsigned long long id = 0;
};

struct Memory {
  std::shared_mutex mu;
  std::map<uintptr_t, Block> device;  // by base address
  std::map<uintptr_t, Block> host;    // cuMemHostAlloc
  unsigned long long next_id = 1;
  std::atomic<uint64_t> async_copies{0};
};

Memory& mem() {
  static auto* m = new Memory();
  return *m;
}

// The block holding [p, p + n) (n == 0: p may be its end); caller holds mu.
const Block* find(const std::map<uintptr_t, Block>& m, uintptr_t p, size_t n,
                  uintptr_t* base = nullptr) {
  auto it = m.upper_bound(p);
  if (it == m.begin()) return nullptr;
  --it;
  const uintptr_t off = p - it->first;
  if (off > it->second.size || n > it->second.size - off) return nullptr;
  if (base) *base = it->first;
  return &it->second;
}

bool pinned(const void* p, size_t n) {
  std::shared_lock<std::shared_mutex> lock(mem().mu);
  return find(mem().host, reinterpret_cast<uintptr_t>(p), n) != nullptr;
}

// A copy as it runs on the stream thread.
CUresult do_copy(const char* call, void* dst, const void* src, size_t n, bool dst_dev,
                 bool src_dev) {
  if (n == 0) return CUDA_SUCCESS;
  auto lock = hold_memory();
  const auto d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
  if (dst_dev && !find(mem().device, d, n)) return fault(call, d, n);
  if (src_dev && !find(mem().device, s, n)) return fault(call, s, n);
  std::memmove(dst, src, n);
  return CUDA_SUCCESS;
}

CUresult copy_async(const char* call, void* dst, const void* src, size_t n, bool dst_dev,
                    bool src_dev, CUstream h) {
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(h, &s)) return r;
  if ((n > 0 && (dst == nullptr || src == nullptr))) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t index = ++mem().async_copies;
  const bool inject = index == fail_copy_index();
  // Pageable host memory, as CUDA treats it: the source is read before the
  // call returns; a copy into it has completed when the call returns.
  std::shared_ptr<std::vector<char>> snapshot;
  if (!src_dev && n > 0 && !pinned(src, n)) {
    const char* c = static_cast<const char*>(src);
    snapshot = std::make_shared<std::vector<char>>(c, c + n);
    src = snapshot->data();
  }
  const bool wait = !dst_dev && n > 0 && !pinned(dst, n);
  enqueue(s, [=]() -> CUresult {
    if (inject) {
      std::fprintf(stderr,
                   "ptcsi: PTCSI_CUDA_FAIL_COPY=%" PRIu64
                   ": %s of %zu bytes fails with CUDA_ERROR_ILLEGAL_ADDRESS (stream %p)\n",
                   index, call, n, stream_id(*s));
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    (void)snapshot;  // kept alive until the copy ran
    return do_copy(call, dst, src, n, dst_dev, src_dev);
  });
  return wait ? synchronize(s) : CUDA_SUCCESS;
}

// Synchronous copies: on the current context's legacy stream, waited for.
CUresult copy_sync(const char* call, void* dst, const void* src, size_t n, bool dst_dev,
                   bool src_dev) {
  Context* c = nullptr;
  if (CUresult r = need_current(&c)) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (dst == nullptr || src == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // The real driver checks unified addresses at the call.
  if ((dst_dev && !device_range(reinterpret_cast<uintptr_t>(dst), n)) ||
      (src_dev && !device_range(reinterpret_cast<uintptr_t>(src), n))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(nullptr, &s)) return r;
  enqueue(s, [=] { return do_copy(call, dst, src, n, dst_dev, src_dev); });
  return synchronize(s);
}

void* as_ptr(CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<uintptr_t>(p)); }

}  // namespace

bool device_range(uintptr_t p, size_t n, int* ordinal) {
  std::shared_lock<std::shared_mutex> lock(mem().mu);
  const Block* b = find(mem().device, p, n);
  if (b && ordinal) *ordinal = b->ordinal;
  return b != nullptr;
}

bool device_range_held(uintptr_t p, size_t n) { return find(mem().device, p, n) != nullptr; }

CUresult fault(const char* call, uintptr_t p, size_t n, const char* why) {
  std::fprintf(stderr,
               "ptcsi: %s: device range [0x%" PRIxPTR
               ", +%zu bytes) %s -> "
               "CUDA_ERROR_ILLEGAL_ADDRESS (sticky on its stream)\n",
               call, p, n, why ? why : "is outside every live allocation");
  return CUDA_ERROR_ILLEGAL_ADDRESS;
}

std::shared_lock<std::shared_mutex> hold_memory() {
  return std::shared_lock<std::shared_mutex>(mem().mu);
}

}  // namespace ptcsi

using namespace ptcsi;

PTCSI_API CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  Context* c = nullptr;
  if (CUresult r = need_current(&c)) return r;
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  void* p = nullptr;
  if (posix_memalign(&p, 256, bytes) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
  std::memset(p, 0xA5, bytes);  // a GPU does not zero new memory either
  Memory& m = mem();
  std::unique_lock<std::shared_mutex> lock(m.mu);
  m.device[reinterpret_cast<uintptr_t>(p)] = Block{bytes, c->ordinal, m.next_id++};
  *dptr = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

// Like the real cuMemFree, waits for the device's work enqueued so far.
PTCSI_API CUresult cuMemFree_v2(CUdeviceptr dptr) {
  if (CUresult r = need_init()) return r;
  if (dptr == 0) return CUDA_SUCCESS;
  Memory& m = mem();
  int ordinal = -1;
  size_t size = 0;
  {
    std::shared_lock<std::shared_mutex> lock(m.mu);
    auto it = m.device.find(static_cast<uintptr_t>(dptr));
    if (it == m.device.end()) return CUDA_ERROR_INVALID_VALUE;
    ordinal = it->second.ordinal;
  }
  synchronize_context(context_of_ordinal(ordinal));
  {
    std::unique_lock<std::shared_mutex> lock(m.mu);
    auto it = m.device.find(static_cast<uintptr_t>(dptr));
    if (it == m.device.end()) return CUDA_ERROR_INVALID_VALUE;  // freed meanwhile
    size = it->second.size;
    m.device.erase(it);
  }
  std::memset(as_ptr(dptr), 0xDD, size);  // stale reads through copies see garbage
  std::free(as_ptr(dptr));
  return CUDA_SUCCESS;
}

PTCSI_API CUresult cuMemHostAlloc(void** pp, size_t bytes, unsigned int flags) {
  Context* c = nullptr;
  if (CUresult r = need_current(&c)) return r;
  const unsigned known =
      CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
  if (pp == nullptr || bytes == 0 || (flags & ~known) != 0) return CUDA_ERROR_INVALID_VALUE;
  void* p = nullptr;
  if (posix_memalign(&p, 4096, bytes) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
  Memory& m = mem();
  std::unique_lock<std::shared_mutex> lock(m.mu);
  m.host[reinterpret_cast<uintptr_t>(p)] = Block{bytes, -1, m.next_id++};
  *pp = p;
  return CUDA_SUCCESS;
}

PTCSI_API CUresult cuMemFreeHost(void* p) {
  if (CUresult r = need_init()) return r;
  Memory& m = mem();
  {
    std::unique_lock<std::shared_mutex> lock(m.mu);
    if (m.host.erase(reinterpret_cast<uintptr_t>(p)) == 0) return CUDA_ERROR_INVALID_VALUE;
  }
  std::free(p);
  return CUDA_SUCCESS;
}

// Device allocations only: pinned host memory and anything else is
// CUDA_ERROR_INVALID_VALUE (stricter than CUDA, which answers for pinned
// memory too; pytfcomm asks only about tensors that claim to be on a GPU).
PTCSI_API CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attr, CUdeviceptr ptr) {
  if (CUresult r = need_init()) return r;
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Memory& m = mem();
  std::shared_lock<std::shared_mutex> lock(m.mu);
  uintptr_t base = 0;
  const Block* b = find(m.device, static_cast<uintptr_t>(ptr), 1, &base);
  if (b == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      *static_cast<CUcontext*>(data) = reinterpret_cast<CUcontext>(context_of_ordinal(b->ordinal));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned int*>(data) = CU_MEMORYTYPE_DEVICE;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      *static_cast<CUdeviceptr*>(data) = ptr;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      return CUDA_ERROR_INVALID_VALUE;  // device memory is not mapped for the host
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(data) = b->ordinal;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
      *static_cast<unsigned long long*>(data) = b->id;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      *static_cast<CUdeviceptr*>(data) = static_cast<CUdeviceptr>(base);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      *static_cast<size_t*>(data) = b->size;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}

PTCSI_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  return copy_sync("cuMemcpyHtoD_v2", as_ptr(dst), src, n, true, false);
}

PTCSI_API CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  return copy_sync("cuMemcpyDtoH_v2", dst, as_ptr(src), n, false, true);
}

PTCSI_API CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  return copy_async("cuMemcpyDtoHAsync_v2", dst, as_ptr(src), n, false, true, s);
}

PTCSI_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  return copy_async("cuMemcpyHtoDAsync_v2", as_ptr(dst), src, n, true, false, s);
}

PTCSI_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return copy_async("cuMemcpyDtoDAsync_v2", as_ptr(dst), as_ptr(src), n, true, true, s);
}

extern "C" int ptcsi_is_device_range(CUdeviceptr p, size_t bytes) {
  return device_range(static_cast<uintptr_t>(p), bytes) ? 1 : 0;
}
