// What the two stand-ins share (tests only). The CUDA driver stand-in
// (cuda/driver.cc, libcuda.so.1) exports these besides the driver API; the
// NCCL stand-in (nccl/nccl.cc, libnccl.so.2) links it and runs its
// collectives as work items on the driver stand-in's streams, so stream
// order, events and asynchronous completion apply to NCCL work as to copies
// and kernels.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

#define PTCSI_EXPORT __attribute__((visibility("default")))

extern "C" {

// A unit of stream work: run on the stream's thread, in enqueue order.
// Returns CUDA_SUCCESS, or an error that becomes the stream's (and every
// later event's) sticky error, as an asynchronous CUDA error does.
typedef CUresult (*ptcsi_work_fn)(void* arg);

// Enqueue fn(arg) on `stream` (0, CU_STREAM_LEGACY = the current context's
// legacy default stream); `release` (may be null) frees arg after fn ran, or
// when the work is dropped because the stream already has a sticky error;
// either way before the work counts as complete (so an event recorded after
// it, or cuStreamSynchronize, also covers the release). Returns at once:
// CUDA_SUCCESS; CUDA_ERROR_INVALID_HANDLE for an unknown or destroyed stream,
// CUDA_ERROR_INVALID_CONTEXT for stream 0 without a current context,
// CUDA_ERROR_INVALID_VALUE for a null fn. On an error return nothing was
// enqueued and `release` is not called (arg stays the caller's).
// PTCSI_CUDA_DELAY_US applies to this work as to copies and kernels.
PTCSI_EXPORT CUresult ptcsi_stream_enqueue(CUstream stream, ptcsi_work_fn fn, void* arg,
                                           void (*release)(void* arg));

// Whether [p, p + bytes) lies inside one live stand-in device allocation
// (bytes == 0: p within or at the end of one). Thread-safe; a device range
// stays valid while work on any stream of its device is pending, since
// cuMemFree waits for that work, as the real one does.
PTCSI_EXPORT int ptcsi_is_device_range(CUdeviceptr p, size_t bytes);

}  // extern "C"
