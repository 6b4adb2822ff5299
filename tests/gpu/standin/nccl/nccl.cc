// libnccl.so.2 stand-in (tests only): the NCCL subset pytfcomm loads
// (csrc/gpu/nccl_lib.h, PTC_NCCL_FUNCS) on host memory. Every collective is
// a work item on the caller's stream of the CUDA driver stand-in
// (ptcsi_stream_enqueue, standin.h), so NCCL work is ordered with copies and
// kernels and its completion is seen through CUDA events, as on a GPU.
// Ranks meet in POSIX shared memory named after the ncclUniqueId (ranks may
// be processes or threads of one process); see comm.h, segment.h and
// collective.h. Only the PTC_NCCL_FUNCS symbols are exported.
//
// Behaviour worth knowing:
// - ncclGetVersion reports the NCCL_VERSION_CODE of the nccl.h built against
//   (>= 2.30, so pytfcomm lets ranks share a "GPU").
// - ncclCommInitRankConfig honours ncclConfig_t's size/magic (a config
//   without NCCL_CONFIG_INITIALIZER is ncclInvalidArgument) and blocking:
//   non-blocking init returns ncclInProgress and ncclCommGetAsyncError says
//   ncclInProgress until every rank joined. Blocking init waits (for ever,
//   unless aborted from another thread through the handle it stored).
// - Stricter than NCCL: ranks whose nranks disagree, a rank out of range or
//   claimed twice fail every rank's init (ncclInvalidUsage); collectives
//   whose kind, count, type, op or root differ between ranks fail every
//   rank's work item and set the async error to ncclInvalidUsage, with a
//   stderr line naming what differed.
// - A failed work item returns CUDA_ERROR_LAUNCH_FAILED to its stream.
// - Like NCCL, an abort or a dead peer does not wake the other ranks: they
//   wait until they are aborted themselves. Abort and destroy remove the
//   segment's name (the last rank to join already did, normally): a rank
//   arriving after a peer aborted starts afresh and waits, until aborted.
// - Count-0 collectives are no-ops (no exchange). Buffers must be stand-in
//   device memory (ptcsi_is_device_range), else ncclInvalidArgument.
//
// Environment knobs (read at each ncclCommInitRankConfig; "the n-th
// collective" counts neither pytfcomm's compact verification, a 4-element
// uint64 max all-reduce, nor count-0 calls):
//   PTCSI_NCCL_NEVER_JOIN=<rank>        that rank's init never completes: it
//       stays ncclInProgress, and so do its peers', which wait for it.
//   PTCSI_NCCL_ASYNC_ERROR_AT=<n>[:<rank>]  the n-th collective (1-based,
//       counted per communicator) of that rank (default: every rank) fails:
//       the async error becomes ncclSystemError (pytfcomm: a lost peer) and
//       the work item fails without reaching its peers.
//   PTCSI_NCCL_HANG_AT=<n>[:<rank>]     that rank's n-th collective never
//       reaches the barrier (a stopped peer) until the comm is aborted.
//   PTCSI_NCCL_INPROGRESS=1             non-blocking comms only: init, every
//       collective and ncclGroupEnd return ncclInProgress, and the async
//       error stays ncclInProgress for 5 ms after each, before ncclSuccess.
//   PTCSI_NCCL_SLOT_BYTES=<bytes>       per-rank exchange slot (default 1 MiB;
//       decided by the rank creating the segment), to test chunking.
//   PTCSI_NCCL_STOP_AT=<n>[:<rank>]     that rank stops before launching its
//       n-th collective (a process stopped between pytfcomm's verification
//       and NCCL): a blocking comm's launch never returns until the comm is
//       revoked or aborted; a non-blocking one returns ncclInProgress and
//       stays in progress. Its peers never see it launch.
//   PTCSI_NCCL_LAUNCH_WAITS=1           blocking comms only: a launch returns
//       once every rank launched the same collective (as NCCL's connection
//       set-up at a peer's first use does), or fails when revoked/aborted.
//   PTCSI_NCCL_TRACE=<file>             appends a line "<pid> <call> <rank>/<nranks>"
//       for every communicator's init, shrink, finalize, destroy and abort (read at
//       each call), so that tests can count what was released and how.
//   PTCSI_NCCL_SHRINK_FAIL=<rank>       that parent rank's ncclCommShrink
//       poisons the child's segment and fails (ncclInternalError): every
//       survivor's child init fails.
//
// ncclCommShrink (NCCL 2.27+) is exported unless built with PTCSI_NO_SHRINK
// (noshrink/ and norevoke/ of ../CMakeLists.txt): the survivors' child joins
// a segment named after the parent's id and the excluded ranks (so every
// survivor finds the same), ranks renumbered in order, traced as
// "ncclCommShrink <new rank>/<new nranks>"; NCCL_SHRINK_ABORT first ends the
// parent's waits and queued work (as an abort does), whose handle stays
// valid until aborted or destroyed. Without it (NCCL_SHRINK_DEFAULT) a
// parent with work in flight or an error is ncclInvalidUsage.
//
// ncclCommRevoke (NCCL 2.28+) is exported unless built with PTCSI_NO_REVOKE
// (norevoke/ and shrink227/: an older NCCL, found by dlsym):
// it ends every wait of the comm (a blocked launch returns
// ncclInvalidUsage, queued work fails), ncclCommGetAsyncError then says
// ncclInProgress until no work item is queued, then ncclSuccess; later
// collectives and ncclCommFinalize are ncclInvalidUsage.
#include <fcntl.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "nccl/collective.h"
#include "nccl/comm.h"
#include "nccl/last_error.h"
#include "nccl/reduce.h"
#include "standin.h"

static_assert(NCCL_VERSION_CODE >= 23000, "the stand-in reports nccl.h's version: want >= 2.30");

#define PTCSI_NCCL_API extern "C" __attribute__((visibility("default")))

namespace ptcsi_nccl {
namespace {

constexpr char kIdPrefix[] = "ptcsi-nccl-uid";

// ncclGroupStart/End state of the calling thread.
struct PendingCall {
  Work* work;
  CUstream stream;
};
struct GroupState {
  int depth = 0;
  std::vector<PendingCall> calls;
  std::vector<std::shared_ptr<Comm>> inits;  // initialised inside the group
  ncclResult_t error = ncclSuccess;
  std::string error_text;
};
GroupState& group() {
  thread_local GroupState g;
  return g;
}

// A call that failed inside a group leaves the group's first error for
// ncclGroupEnd; returns r.
ncclResult_t group_failed(GroupState& g, ncclResult_t r) {
  if (g.depth > 0 && g.error == ncclSuccess) {
    g.error = r;
    g.error_text = last_error();
  }
  return r;
}

void sleep_tick() { std::this_thread::sleep_for(std::chrono::microseconds(200)); }

// Waits for a blocking comm's init (or a finalize) to settle.
ncclResult_t wait_settled(Comm& c) {
  for (;;) {
    ncclResult_t s = c.state();
    if (s != ncclInProgress) return s;
    if (c.stop.load()) return fail(ncclInvalidUsage, "NCCL stand-in: aborted while waiting");
    sleep_tick();
  }
}

ncclResult_t stopped_in_launch(Comm& c) {
  return fail(ncclInvalidUsage, std::string("NCCL stand-in: the communicator was ") +
                                    (c.revoked.load() ? "revoked" : "aborted") +
                                    " during a launch");
}

// PTCSI_NCCL_STOP_AT and PTCSI_NCCL_LAUNCH_WAITS, then onto the stream.
ncclResult_t enqueue(Work* w, CUstream stream) {
  std::shared_ptr<Comm> c = w->comm;
  if (c->revoked.load()) {
    delete w;
    return fail(ncclInvalidUsage, "NCCL stand-in: collective on a revoked communicator");
  }
  if (c->knobs.stop_here(c->rank, w->call)) {
    delete w;
    if (!c->blocking) {
      c->stuck.store(true);
      return ncclSuccess;
    }
    while (!c->stop.load()) sleep_tick();
    return stopped_in_launch(*c);
  }
  if (c->blocking && c->knobs.launch_waits) {
    c->seg->ctl(c->rank)->launched.store(w->call, std::memory_order_release);
    for (int r = 0; r < c->nranks; ++r) {
      while (c->seg->ctl(r)->launched.load(std::memory_order_acquire) < w->call) {
        if (c->stop.load()) {
          delete w;
          return stopped_in_launch(*c);
        }
        sleep_tick();
      }
    }
  }
  c->pending.fetch_add(1);
  CUresult r = ptcsi_stream_enqueue(stream, run_work, w, release_work);
  if (r != CUDA_SUCCESS) {
    // Not accepted: the work (and its release) is still ours.
    delete w;
    c->pending.fetch_sub(1);
    return fail(ncclUnhandledCudaError,
                "NCCL stand-in: ptcsi_stream_enqueue failed with CUDA error " + std::to_string(r));
  }
  return ncclSuccess;
}

// Whether the buffers the call reads and writes are device memory (a GPU
// would fault on host memory NCCL did not register).
bool device_buffers(Kind kind, const void* send, const void* recv, size_t count,
                    ncclDataType_t type, int nranks, int rank, int root) {
  const size_t bytes = count * type_size(type);
  const size_t n = static_cast<size_t>(nranks);
  size_t send_bytes = kind == Kind::kReduceScatter ? bytes * n : bytes;
  size_t recv_bytes = kind == Kind::kAllGather ? bytes * n : bytes;
  bool ok = ptcsi_is_device_range(reinterpret_cast<CUdeviceptr>(recv), recv_bytes) != 0;
  if (kind != Kind::kBroadcast || rank == root) {
    ok = ok && ptcsi_is_device_range(reinterpret_cast<CUdeviceptr>(send), send_bytes) != 0;
  }
  return ok;
}

ncclResult_t collective(Kind kind, const void* send, void* recv, size_t count, ncclDataType_t type,
                        ncclRedOp_t op, int root, ncclComm_t handle, cudaStream_t stream) {
  std::shared_ptr<Comm> c = find_comm(handle);
  const std::string what = std::string("NCCL stand-in: ") + kind_name(kind) + ": ";
  ncclResult_t r = ncclSuccess;
  if (c == nullptr) {
    r = fail(ncclInvalidArgument, what + "invalid communicator (null, destroyed or aborted)");
  } else if (type_size(type) == 0) {
    r = fail(ncclInvalidArgument, what + "unsupported datatype " + std::to_string(type));
  } else if ((kind == Kind::kAllReduce || kind == Kind::kReduceScatter) && !op_supported(op)) {
    r = fail(ncclInvalidArgument, what + "unsupported reduction op " + std::to_string(op));
  } else if (kind == Kind::kBroadcast && (root < 0 || root >= c->nranks)) {
    r = fail(ncclInvalidArgument, what + "root " + std::to_string(root) + " out of range");
  } else if (count > 0 && (recv == nullptr ||
                           (send == nullptr && (kind != Kind::kBroadcast || root == c->rank)))) {
    r = fail(ncclInvalidArgument, what + "null buffer");
  } else if (count > 0 &&
             !device_buffers(kind, send, recv, count, type, c->nranks, c->rank, root)) {
    r = fail(ncclInvalidArgument, what + "a buffer is not (entirely) stand-in device memory");
  } else if (c->error.load() != ncclSuccess) {
    r = fail(static_cast<ncclResult_t>(c->error.load()), c->error_text());
  }
  GroupState& g = group();
  if (r != ncclSuccess) return group_failed(g, r);
  if (count == 0) return ncclSuccess;
  // pytfcomm's compact verification (csrc/gpu/verify_cache.h) is not
  // counted, so the fault knobs name the same data collective with it or
  // without it; its number is 0, which no knob matches.
  const bool check = kind == Kind::kAllReduce && type == ncclUint64 && op == ncclMax && count == 4;
  auto* w =
      new Work{c, kind, send, recv, count, type, op, root, check ? 0 : c->calls.fetch_add(1) + 1};
  auto s = reinterpret_cast<CUstream>(stream);
  if (g.depth > 0) {
    g.calls.push_back({w, s});
  } else {
    r = enqueue(w, s);
    if (r != ncclSuccess) return r;
    if (c->stuck.load() && !c->blocking) return ncclInProgress;
  }
  c->mark_busy();
  return c->knobs.in_progress && !c->blocking ? ncclInProgress : ncclSuccess;
}

const char* error_string(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    case ncclTimeout:
      return "NCCL operation timed out";
    default:
      return "unknown result code";
  }
}

}  // namespace
}  // namespace ptcsi_nccl

using namespace ptcsi_nccl;  // NOLINT: the C entry points below

// PTCSI_NCCL_TRACE: one line per call, appended in one write (whole lines
// from concurrent processes).
static void trace(const char* call, const Comm& c) {
  const char* path = std::getenv("PTCSI_NCCL_TRACE");
  if (path == nullptr || *path == '\0') return;
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return;
  std::string line = std::to_string(getpid()) + " " + call + " " + std::to_string(c.rank) + "/" +
                     std::to_string(c.nranks) + "\n";
  ssize_t n = write(fd, line.data(), line.size());
  (void)n;
  close(fd);
}

PTCSI_NCCL_API ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return fail(ncclInvalidArgument, "ncclGetVersion: null version");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

PTCSI_NCCL_API const char* ncclGetErrorString(ncclResult_t result) { return error_string(result); }

PTCSI_NCCL_API const char* ncclGetLastError(ncclComm_t /*comm: as NCCL, thread-local*/) {
  return last_error();
}

PTCSI_NCCL_API ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return fail(ncclInvalidArgument, "ncclGetUniqueId: null id");
  std::memset(id, 0, sizeof(*id));
  std::memcpy(id->internal, kIdPrefix, sizeof(kIdPrefix));
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(ncclSystemError, "ncclGetUniqueId: cannot open /dev/urandom");
  size_t got = sizeof(kIdPrefix);
  while (got < sizeof(id->internal)) {
    ssize_t n = read(fd, id->internal + got, sizeof(id->internal) - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  if (got < sizeof(id->internal)) return fail(ncclSystemError, "ncclGetUniqueId: short read");
  return ncclSuccess;
}

// config's blocking (its size/magic checked); `inherit` when config is null.
static ncclResult_t read_config(const char* call, const ncclConfig_t* config, bool inherit,
                                bool* blocking) {
  *blocking = inherit;
  if (config == nullptr) return ncclSuccess;
  constexpr size_t need = offsetof(ncclConfig_t, blocking) + sizeof(int);
  if (config->size < need || config->magic != NCCL_API_MAGIC) {
    return fail(
        ncclInvalidArgument,
        std::string(call) + ": config not set up with NCCL_CONFIG_INITIALIZER (size/magic)");
  }
  if (config->blocking != NCCL_CONFIG_UNDEF_INT) {
    if (config->blocking != 0 && config->blocking != 1) {
      return fail(ncclInvalidArgument, std::string(call) + ": config.blocking must be 0 or 1");
    }
    *blocking = config->blocking == 1;
  }
  return ncclSuccess;
}

// The common part of init and shrink: c (rank, nranks, blocking set) joins
// `id`'s segment; the handle goes to *newcomm.
static ncclResult_t start_comm(std::shared_ptr<Comm> c, const ncclUniqueId& id, ncclComm_t* newcomm,
                               const char* call, const std::string& poison = "") {
  ncclResult_t r = join(*c, id, poison);
  GroupState& g = group();
  if (r != ncclSuccess) return group_failed(g, r);
  c->mark_busy();
  *newcomm = register_comm(c);
  trace(call, *c);
  if (g.depth > 0) {
    g.inits.push_back(c);  // a blocking one is waited for at the outermost ncclGroupEnd
    return c->blocking ? ncclSuccess : ncclInProgress;
  }
  if (!c->blocking) return ncclInProgress;
  return wait_settled(*c);
}

PTCSI_NCCL_API ncclResult_t ncclCommInitRankConfig(ncclComm_t* newcomm, int nranks, ncclUniqueId id,
                                                   int rank, ncclConfig_t* config) {
  if (newcomm == nullptr) return fail(ncclInvalidArgument, "ncclCommInitRankConfig: null comm");
  *newcomm = nullptr;
  bool blocking = true;
  ncclResult_t r = read_config("ncclCommInitRankConfig", config, true, &blocking);
  if (r != ncclSuccess) return r;
  if (nranks < 1 || nranks > kMaxRanks) {
    return fail(ncclInvalidArgument,
                "ncclCommInitRankConfig: nranks " + std::to_string(nranks) + " out of range");
  }
  auto c = std::make_shared<Comm>();
  c->rank = rank;
  c->nranks = nranks;
  c->blocking = blocking;
  c->knobs = read_knobs();
  return start_comm(c, id, newcomm, "ncclCommInitRankConfig");
}

#ifndef PTCSI_NO_SHRINK
PTCSI_NCCL_API ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList,
                                           int excludeRanksCount, ncclComm_t* newcomm,
                                           ncclConfig_t* config, int shrinkFlags) {
  if (newcomm == nullptr) return fail(ncclInvalidArgument, "ncclCommShrink: null newcomm");
  *newcomm = nullptr;
  std::shared_ptr<Comm> p = find_comm(comm);
  if (p == nullptr) return fail(ncclInvalidArgument, "ncclCommShrink: invalid communicator");
  if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT) {
    return fail(ncclInvalidArgument, "ncclCommShrink: unknown shrinkFlags");
  }
  if (excludeRanksCount < 0 || (excludeRanksCount > 0 && excludeRanksList == nullptr)) {
    return fail(ncclInvalidArgument, "ncclCommShrink: bad exclude list");
  }
  std::vector<int> excluded(excludeRanksList, excludeRanksList + excludeRanksCount);
  std::sort(excluded.begin(), excluded.end());
  for (size_t i = 0; i < excluded.size(); ++i) {
    if (excluded[i] < 0 || excluded[i] >= p->nranks || (i > 0 && excluded[i] == excluded[i - 1]) ||
        excluded[i] == p->rank) {
      return fail(ncclInvalidArgument, "ncclCommShrink: excluded rank " +
                                           std::to_string(excluded[i]) +
                                           " out of range, repeated or the caller's own");
    }
  }
  // As NCCL: without NCCL_SHRINK_ABORT the parent must be quiescent.
  if (shrinkFlags == NCCL_SHRINK_DEFAULT &&
      (p->pending.load() > 0 || p->stuck.load() || p->error.load() != ncclSuccess)) {
    return fail(ncclInvalidUsage,
                "ncclCommShrink: the parent has operations in flight or an error; use "
                "NCCL_SHRINK_ABORT");
  }
  bool blocking = p->blocking;
  ncclResult_t r = read_config("ncclCommShrink", config, p->blocking, &blocking);
  if (r != ncclSuccess) return r;
  if (shrinkFlags == NCCL_SHRINK_ABORT) p->stop.store(true);  // its waits end, queued work fails
  // Every survivor derives the same child id from the parent's and the list.
  ncclUniqueId id = p->id;
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    for (int b = 0; b < 8; ++b) h = (h ^ ((v >> (8 * b)) & 0xff)) * 1099511628211ull;
  };
  for (char ch : std::string(id.internal, sizeof(id.internal))) mix(static_cast<uint8_t>(ch));
  mix(excluded.size());
  for (int e : excluded) mix(static_cast<uint64_t>(e));
  std::memcpy(id.internal + sizeof(kIdPrefix), &h, sizeof(h));
  auto c = std::make_shared<Comm>();
  c->rank = p->rank - static_cast<int>(std::lower_bound(excluded.begin(), excluded.end(), p->rank) -
                                       excluded.begin());
  c->nranks = p->nranks - excludeRanksCount;
  c->blocking = blocking;
  c->knobs = read_knobs();
  std::string poison;
  if (c->knobs.shrink_fail == p->rank) {
    poison = "PTCSI_NCCL_SHRINK_FAIL: parent rank " + std::to_string(p->rank) + "'s shrink failed";
  }
  return start_comm(c, id, newcomm, "ncclCommShrink", poison);
}
#endif

PTCSI_NCCL_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  std::shared_ptr<Comm> c = find_comm(comm);
  if (c == nullptr || asyncError == nullptr) {
    return fail(ncclInvalidArgument, "ncclCommGetAsyncError: invalid communicator or null result");
  }
  *asyncError = c->state();
  return ncclSuccess;
}

PTCSI_NCCL_API ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  std::shared_ptr<Comm> c = find_comm(comm);
  if (c == nullptr) return fail(ncclInvalidArgument, "ncclCommFinalize: invalid communicator");
  if (c->revoked.load()) {
    return fail(ncclInvalidUsage, "ncclCommFinalize: invalid after ncclCommRevoke");
  }
  c->finalizing.store(true);
  trace("ncclCommFinalize", *c);
  if (c->blocking) return wait_settled(*c);
  return c->pending.load() > 0 ? ncclInProgress : ncclSuccess;
}

static ncclResult_t release_comm(ncclComm_t comm, const char* call) {
  std::shared_ptr<Comm> c = unregister_comm(comm);
  if (c == nullptr) {
    return fail(ncclInvalidArgument, std::string(call) + ": invalid communicator (already freed?)");
  }
  trace(call, *c);
  c->stop.store(true);  // waiting work sees it within a tick and fails
  c->seg->unlink();     // normally gone already (the last rank to join removed it)
  return ncclSuccess;   // freed when its last queued work item is released
}

PTCSI_NCCL_API ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  return release_comm(comm, "ncclCommDestroy");
}

PTCSI_NCCL_API ncclResult_t ncclCommAbort(ncclComm_t comm) {
  return release_comm(comm, "ncclCommAbort");
}

#ifndef PTCSI_NO_REVOKE
PTCSI_NCCL_API ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  std::shared_ptr<Comm> c = find_comm(comm);
  if (c == nullptr) return fail(ncclInvalidArgument, "ncclCommRevoke: invalid communicator");
  if (revokeFlags != NCCL_REVOKE_DEFAULT) {
    return fail(ncclInvalidArgument, "ncclCommRevoke: revokeFlags must be NCCL_REVOKE_DEFAULT");
  }
  c->revoked.store(true);
  c->stop.store(true);  // every wait of the comm ends within a tick; queued work fails
  return ncclSuccess;
}
#endif

PTCSI_NCCL_API ncclResult_t ncclGroupStart() {
  ++group().depth;
  return ncclSuccess;
}

PTCSI_NCCL_API ncclResult_t ncclGroupEnd() {
  GroupState& g = group();
  if (g.depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--g.depth > 0) return ncclSuccess;
  std::vector<PendingCall> calls = std::move(g.calls);
  std::vector<std::shared_ptr<Comm>> inits = std::move(g.inits);
  ncclResult_t r = g.error;
  std::string text = std::move(g.error_text);
  g = GroupState();
  if (r != ncclSuccess) {
    for (PendingCall& p : calls) delete p.work;  // a failed group launches nothing
    return fail(r, text);
  }
  bool in_progress = false;
  for (size_t i = 0; i < calls.size(); ++i) {
    std::shared_ptr<Comm> c = calls[i].work->comm;
    if (r == ncclSuccess) {
      r = enqueue(calls[i].work, calls[i].stream);
    } else {
      delete calls[i].work;
    }
    if (c->knobs.in_progress && !c->blocking) {
      c->mark_busy();
      in_progress = true;
    }
    if (c->stuck.load() && !c->blocking) in_progress = true;
  }
  if (r != ncclSuccess) return r;
  for (auto& c : inits) {
    if (c->blocking) {
      r = wait_settled(*c);
      if (r != ncclSuccess) return r;
    } else if (c->knobs.in_progress) {
      in_progress = true;
    }
  }
  return in_progress ? ncclInProgress : ncclSuccess;
}

PTCSI_NCCL_API ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                          ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                          cudaStream_t stream) {
  return collective(Kind::kAllReduce, sendbuff, recvbuff, count, datatype, op, -1, comm, stream);
}

PTCSI_NCCL_API ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff,
                                              size_t recvcount, ncclDataType_t datatype,
                                              ncclRedOp_t op, ncclComm_t comm,
                                              cudaStream_t stream) {
  return collective(Kind::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, -1, comm,
                    stream);
}

PTCSI_NCCL_API ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                          ncclDataType_t datatype, ncclComm_t comm,
                                          cudaStream_t stream) {
  return collective(Kind::kAllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, -1, comm,
                    stream);
}

PTCSI_NCCL_API ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                          ncclDataType_t datatype, int root, ncclComm_t comm,
                                          cudaStream_t stream) {
  return collective(Kind::kBroadcast, sendbuff, recvbuff, count, datatype, ncclSum, root, comm,
                    stream);
}
