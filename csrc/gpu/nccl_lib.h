// NCCL, loaded at run time with dlopen (never linked), so that one build
// runs with the system's libnccl.so.2, the nvidia-nccl-cu12/cu13 wheel's, or
// none at all. nccl.h is used only for types and prototypes.
#pragma once

#include <nccl.h>

#include <string>
#include <vector>

#include "common/dtype.h"

namespace pytfcomm::gpu {

#define PTC_NCCL_FUNCS(X)   \
  X(ncclGetVersion)         \
  X(ncclGetErrorString)     \
  X(ncclGetLastError)       \
  X(ncclGetUniqueId)        \
  X(ncclCommInitRankConfig) \
  X(ncclCommGetAsyncError)  \
  X(ncclCommFinalize)       \
  X(ncclCommDestroy)        \
  X(ncclCommAbort)          \
  X(ncclGroupStart)         \
  X(ncclGroupEnd)           \
  X(ncclAllReduce)          \
  X(ncclReduceScatter)      \
  X(ncclAllGather)          \
  X(ncclBroadcast)

// ncclCommRevoke (NCCL 2.28+) and ncclCommShrink (2.27+), declared here so
// that older headers build.
using NcclCommRevokeFn = ncclResult_t (*)(ncclComm_t comm, int revoke_flags);
using NcclCommShrinkFn = ncclResult_t (*)(ncclComm_t comm, int* exclude_ranks, int exclude_count,
                                          ncclComm_t* newcomm, ncclConfig_t* config,
                                          int shrink_flags);
// NCCL_SHRINK_ABORT: end the parent's outstanding operations, then shrink.
constexpr int kNcclShrinkAbort = 1;

struct NcclLib {
#define PTC_DECLARE(name) decltype(&::name) name = nullptr;
  PTC_NCCL_FUNCS(PTC_DECLARE)
#undef PTC_DECLARE
  // Optional: null when the loaded NCCL lacks it (then communicators are
  // non-blocking; gpu/nccl_clique.h).
  NcclCommRevokeFn ncclCommRevoke = nullptr;
  // Optional: null when the loaded NCCL lacks it (then the survivors of a
  // lost rank get a new communicator from a fresh ncclUniqueId; gpu/clique.h).
  NcclCommShrinkFn ncclCommShrink = nullptr;
  // Whether the survivors of a lost rank shrink the old communicator: it
  // needs ncclCommShrink, and ncclCommRevoke to end the failed call's work
  // at once. Without the revoke (NCCL 2.27) that work would stay in flight
  // until the shrink, on the GPU's stream, holding back the device's
  // synchronous copies (the program's next step copies before its first
  // collective): the old communicator is aborted and re-created instead.
  bool shrinks() const { return ncclCommShrink != nullptr && ncclCommRevoke != nullptr; }
  std::string path;
  int version = 0;  // NCCL_VERSION_CODE of the loaded library, e.g. 23007
};

// Non-blocking communicators (ncclConfig_t.blocking = 0) and
// ncclCommGetAsyncError polling need at least this version.
constexpr int kMinNcclVersion = 21400;

// Libraries to try in order, before "libnccl.so.2" from the loader's path.
// PYTFCOMM_NCCL_LIBRARY, when set, is tried first. Set by the Python layer
// (the nvidia-nccl wheel's lib directory) before the first load; later
// calls are ignored once NCCL was loaded.
void set_nccl_candidates(const std::vector<std::string>& paths);

struct NcclStatus {
  bool loaded = false;
  std::string path;
  int version = 0;
  std::string error;  // every path tried and why it failed, when !loaded
};
NcclStatus nccl_status();

// The loaded library; throws kConfig naming what was tried and what to do.
const NcclLib& nccl();

// "2.30.7"
std::string nccl_version_string(int code);

// NCCL's type for a core dtype (bool travels as uint8); kInvalidArgument
// for types NCCL lacks.
ncclDataType_t nccl_type(DType t);
// sum, min, max or prod (mean is lowered by the caller); bool reduces as
// bytes: any (sum, max) is a max, all (prod, min) a min.
ncclRedOp_t nccl_op(ReduceOp op, DType t);

// Errors: gpu/check.h (throw_nccl_error, PTC_NCCL_CHECK).

}  // namespace pytfcomm::gpu
