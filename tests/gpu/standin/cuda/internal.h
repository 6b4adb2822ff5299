// What the pieces of the CUDA driver stand-in share (driver.cc: init,
// devices, contexts, errors; memory.cc: allocations and copies; streams.cc:
// streams and events; kernels.cc: modules and launches). Everything here is
// hidden; only the cu* API and standin.h's hooks are exported.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "standin.h"

// The exported driver entry points (cuda.h declares them; the target builds
// with hidden visibility).
#define PTCSI_API extern "C" __attribute__((visibility("default")))

namespace ptcsi {

struct Stream;

// A device's primary context. The handle (CUcontext) is a pointer to this;
// contexts are never freed, so a stale handle stays recognisable.
struct Context {
  int ordinal = 0;                 // as the process sees it (after CUDA_VISIBLE_DEVICES)
  int physical = 0;                // index among the PTCSI_GPUS stand-in GPUs
  int refs = 0;                    // primary-context retains; active while > 0 (under mutex())
  std::shared_ptr<Stream> legacy;  // created on first use (under mutex())
  std::vector<std::weak_ptr<Stream>> streams;  // every stream made in it (under mutex())
};

// The lock of the device/context tables (refs, legacy, streams).
std::mutex& mutex();

// CUDA_ERROR_NOT_INITIALIZED until cuInit succeeded.
CUresult need_init();
int device_count();
// The context of a handle, or null for an unknown one.
Context* find_context(CUcontext h);
Context* context_of_ordinal(int ordinal);
// This thread's current context (any known context; may be inactive).
Context* current();
// The current context when active: CUDA_ERROR_INVALID_CONTEXT without one,
// CUDA_ERROR_CONTEXT_IS_DESTROYED after its last primary release.
CUresult need_current(Context** out);
bool active(const Context* c);  // takes mutex()

// Fault knobs, read once by cuInit (see driver.cc).
unsigned delay_us();
uint64_t fail_copy_index();  // 0: never

// ---- streams (streams.cc) ----
using Work = std::function<CUresult()>;
// A stream handle as the API takes it: 0, CU_STREAM_LEGACY and
// CU_STREAM_PER_THREAD are the current context's legacy default stream.
// CUDA_ERROR_INVALID_HANDLE for an unknown or destroyed stream.
CUresult resolve_stream(CUstream h, std::shared_ptr<Stream>* out);
Context* stream_context(const Stream& s);
// Append work; it runs on the stream's thread after everything enqueued
// before it (and, for the legacy stream and blocking streams, after the
// implicit synchronisation CUDA does between them). `delay`: apply
// PTCSI_CUDA_DELAY_US first.
void enqueue(const std::shared_ptr<Stream>& s, Work fn, bool delay = true);
// Block until what was enqueued on s so far has run; its sticky error.
CUresult synchronize(const std::shared_ptr<Stream>& s);
// Every stream of a context (the legacy one included), as synchronize().
CUresult synchronize_context(Context* c);
// A short text naming a stream in messages.
const void* stream_id(const Stream& s);

// ---- memory (memory.cc) ----
// Whether [p, p + n) lies inside one live device allocation; its ordinal.
bool device_range(uintptr_t p, size_t n, int* ordinal = nullptr);
// The same, for a caller that holds hold_memory().
bool device_range_held(uintptr_t p, size_t n);
// Print the one-line fault report and return CUDA_ERROR_ILLEGAL_ADDRESS.
CUresult fault(const char* call, uintptr_t p, size_t n, const char* why = nullptr);
// Holds device memory in place (no cuMemFree completes) while work reads
// or writes it on a stream thread.
std::shared_lock<std::shared_mutex> hold_memory();

}  // namespace ptcsi
