// The one way CUDA driver and NCCL results become pytfcomm errors (the kinds
// of common/error.h), like NCCL's own NCCLCHECK: every driver call goes
// through PTC_CU_CHECK, every NCCL call outside a communicator through
// PTC_NCCL_CHECK, and NcclClique (gpu/nccl_clique.h) maps what its
// communicators report with throw_nccl_error.
#pragma once

#include <cuda.h>
#include <nccl.h>

#include <string>

#include "common/error.h"

namespace pytfcomm::gpu {

// A remote or system error is a lost peer (or network); invalid usage or
// argument is a configuration error (a GPU shared by ranks without NCCL >=
// 2.30's multi-rank support looks like that); the rest are internal.
ErrorKind nccl_error_kind(ncclResult_t r);
// A driver, device or binary that cannot serve this build is a
// configuration error; everything else (a fault, out of memory) internal.
ErrorKind cuda_error_kind(CUresult r);

// Throws "NCCL: <what> failed: <NCCL's text>[ (<detail>)]" with the kind
// above, and the hint for configuration errors.
// `file` and `line` are the caller's, for the message's "[file:line]".
[[noreturn]] void throw_nccl_error(ncclResult_t r, const std::string& what,
                                   const std::string& detail, const char* file, int line);
[[noreturn]] void throw_cuda_error(CUresult r, const std::string& what, const char* file, int line);

// "ncclGetUniqueId" from "lib.ncclGetUniqueId(&id)": a call's name for messages.
std::string call_name(const char* expr);

}  // namespace pytfcomm::gpu

#define PTC_CU_CHECK(call)                                                  \
  do {                                                                      \
    CUresult ptc_r_ = (call);                                               \
    if (ptc_r_ != CUDA_SUCCESS)                                             \
      ::pytfcomm::gpu::throw_cuda_error(ptc_r_, #call, __FILE__, __LINE__); \
  } while (0)

// For NCCL calls that need no settling; ncclInProgress is accepted (in a
// group of non-blocking communicators it means "queued": NcclClique settles).
#define PTC_NCCL_CHECK(call)                                                                     \
  do {                                                                                           \
    ncclResult_t ptc_r_ = (call);                                                                \
    if (ptc_r_ != ncclSuccess && ptc_r_ != ncclInProgress)                                       \
      ::pytfcomm::gpu::throw_nccl_error(ptc_r_, ::pytfcomm::gpu::call_name(#call), "", __FILE__, \
                                        __LINE__);                                               \
  } while (0)
