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

// Enqueue fn(arg) on `stream` (0 = the context's default stream); `release`
// (may be null) frees arg after fn ran or when it is dropped. Returns
// CUDA_ERROR_INVALID_HANDLE for an unknown stream.
PTCSI_EXPORT CUresult ptcsi_stream_enqueue(CUstream stream, ptcsi_work_fn fn, void* arg,
                                           void (*release)(void* arg));

// Whether [p, p + bytes) lies inside one live stand-in device allocation.
PTCSI_EXPORT int ptcsi_is_device_range(CUdeviceptr p, size_t bytes);

}  // extern "C"
