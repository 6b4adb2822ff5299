#include "gpu/nccl_comms.h"

#include <cstring>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/logging.h"
#include "engine/communicator.h"
#include "gpu/cuda_driver.h"
#include "gpu/nccl_lib.h"

namespace pytfcomm::gpu {
namespace {

void poll_tick(TimePoint start) {
  if (Clock::now() - start < std::chrono::microseconds(100)) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

}  // namespace

NcclComms::NcclComms(Communicator& boot, Device& device, TimePoint deadline)
    : boot_(boot), device_(device) {
  const NcclLib& n = nccl();
  local_ = boot.local_group();
  cross_ = boot.cross_group();
  uniform_ = boot.uniform_hosts();
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (boot.rank() == 0) {
    ncclResult_t r = n.ncclGetUniqueId(&id);
    if (r != ncclSuccess) fail(nullptr, r, "ncclGetUniqueId");
  }
  boot.broadcast(&id, sizeof(id), DType::kUInt8, 0, seconds_left(deadline));
  world_ = init_comm(id, boot.size(), boot.rank(), deadline, "world");
  PTC_LOG(kInfo, "NCCL ", nccl_version_string(n.version),
          " communicator ready on cuda:", device.ordinal(), " (", boot.size(), " ranks)");
}

NcclComms::~NcclComms() {
  if (failed_) return;  // abort() already released everything
  const NcclLib& n = nccl();
  // Finalize flushes outstanding work; bounded, and aborted past the bound.
  TimePoint deadline = deadline_after(10.0);
  for (ncclComm_t c : {world_, local_comm_, cross_comm_}) {
    if (c == nullptr) continue;
    ncclResult_t r = n.ncclCommFinalize(c);
    ncclResult_t state = r;
    auto start = Clock::now();
    while (state == ncclInProgress && Clock::now() < deadline) {
      poll_tick(start);
      if (n.ncclCommGetAsyncError(c, &state) != ncclSuccess) break;
    }
    if (state == ncclSuccess) {
      n.ncclCommDestroy(c);
    } else {
      n.ncclCommAbort(c);
    }
  }
}

void NcclComms::abort() noexcept {
  if (failed_) return;
  failed_ = true;
  const NcclLib& n = nccl();
  for (ncclComm_t* c : {&world_, &local_comm_, &cross_comm_}) {
    if (*c != nullptr) n.ncclCommAbort(*c);
    *c = nullptr;
  }
}

void NcclComms::fail(ncclComm_t comm, ncclResult_t r, const char* call) {
  const NcclLib& n = nccl();
  std::string last = comm ? n.ncclGetLastError(comm) : n.ncclGetLastError(nullptr);
  std::string what = str_cat(call, " failed: ", n.ncclGetErrorString(r), last.empty() ? "" : " (",
                             last, last.empty() ? "" : ")");
  abort();
  throw_nccl_error(r, what);
}

void NcclComms::settle(ncclComm_t comm, ncclResult_t r, const char* call, TimePoint deadline) {
  if (r == ncclSuccess) return;
  if (r != ncclInProgress) fail(comm, r, call);
  const NcclLib& n = nccl();
  auto start = Clock::now();
  for (;;) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t q = n.ncclCommGetAsyncError(comm, &state);
    if (q != ncclSuccess) fail(comm, q, "ncclCommGetAsyncError");
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) fail(comm, state, call);
    if (Clock::now() >= deadline) {
      abort();
      PTC_THROW(kTimeout, "timed out in ", call,
                " waiting for the other ranks (NCCL was aborted); a rank is missing, hung or "
                "slower than PYTFCOMM_TIMEOUT");
    }
    poll_tick(start);
  }
}

ncclComm_t NcclComms::init_comm(const ncclUniqueId& id, int nranks, int rank, TimePoint deadline,
                                const char* which) {
  const NcclLib& n = nccl();
  ScopedContext scope(device_.context());
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = n.ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    if (comm) n.ncclCommAbort(comm);
    fail(nullptr, r, "ncclCommInitRankConfig");
  }
  // Until it is stored, abort() cannot see it: keep it in a slot now.
  ncclComm_t* slot = std::strcmp(which, "world") == 0   ? &world_
                     : std::strcmp(which, "local") == 0 ? &local_comm_
                                                        : &cross_comm_;
  *slot = comm;
  settle(comm, r, "ncclCommInitRankConfig", deadline);
  return comm;
}

void NcclComms::init_hierarchy(TimePoint deadline) {
  if (local_comm_ != nullptr) return;
  PTC_CHECK_ARG(uniform_, "hierarchical all-reduce needs the same number of ranks on every host");
  const NcclLib& n = nccl();
  // Rank 0 of each group makes its id; one all-gather over TCP delivers all.
  struct Ids {
    ncclUniqueId local, cross;
  };
  Ids mine;
  std::memset(&mine, 0, sizeof(mine));
  if (local_.me == 0) {
    ncclResult_t r = n.ncclGetUniqueId(&mine.local);
    if (r != ncclSuccess) fail(nullptr, r, "ncclGetUniqueId");
  }
  if (cross_.me == 0) {
    ncclResult_t r = n.ncclGetUniqueId(&mine.cross);
    if (r != ncclSuccess) fail(nullptr, r, "ncclGetUniqueId");
  }
  std::vector<Ids> all(static_cast<size_t>(boot_.size()));
  boot_.allgather(&mine, all.data(), sizeof(Ids), DType::kUInt8, seconds_left(deadline));
  init_comm(all[static_cast<size_t>(local_.global(0))].local, local_.size(), local_.me, deadline,
            "local");
  init_comm(all[static_cast<size_t>(cross_.global(0))].cross, cross_.size(), cross_.me, deadline,
            "cross");
}

void NcclComms::wait(TimePoint deadline, const char* what) {
  const NcclLib& n = nccl();
  const CudaDriver& d = driver();
  done_.record(device_.stream());
  auto start = Clock::now();
  for (;;) {
    CUresult q = d.cuEventQuery(done_.get());
    if (q == CUDA_SUCCESS) return;
    if (q != CUDA_ERROR_NOT_READY) {
      abort();
      PTC_THROW(kInternal, "CUDA failed during ", what, ": ", cu_error_text(q));
    }
    // A peer that died or a broken connection shows up as an async error.
    for (ncclComm_t c : {world_, local_comm_, cross_comm_}) {
      if (c == nullptr) continue;
      ncclResult_t state = ncclSuccess;
      n.ncclCommGetAsyncError(c, &state);
      if (state != ncclSuccess && state != ncclInProgress) fail(c, state, what);
    }
    if (Clock::now() >= deadline) {
      abort();
      PTC_THROW(kTimeout, "timed out in ", what,
                " on the GPU (NCCL was aborted): a rank did not join in time, hung or is slower "
                "than PYTFCOMM_TIMEOUT");
    }
    poll_tick(start);
  }
}

void NcclComms::allreduce(CUdeviceptr in, CUdeviceptr out, size_t count, DType dtype, ReduceOp op,
                          TimePoint deadline) {
  PTC_CHECK_ARG(!failed_, "the NCCL communicator was aborted after an earlier error");
  ncclResult_t r =
      nccl().ncclAllReduce(reinterpret_cast<const void*>(in), reinterpret_cast<void*>(out), count,
                           nccl_type(dtype), nccl_op(op, dtype), world_, device_.stream());
  settle(world_, r, "ncclAllReduce", deadline);
}

void NcclComms::hierarchical_allreduce(CUdeviceptr in, CUdeviceptr out, size_t count, DType dtype,
                                       ReduceOp op, TimePoint deadline) {
  PTC_CHECK_ARG(!failed_, "the NCCL communicator was aborted after an earlier error");
  init_hierarchy(deadline);
  const NcclLib& n = nccl();
  const size_t esz = dtype_size(dtype);
  const size_t L = static_cast<size_t>(local_.size());
  const size_t part = count / L;  // each local rank owns `part` elements
  const ncclDataType_t t = nccl_type(dtype);
  const ncclRedOp_t o = nccl_op(op, dtype);
  CUstream s = device_.stream();
  if (part > 0) {
    CUdeviceptr mine = out + static_cast<size_t>(local_.me) * part * esz;
    ncclResult_t r = n.ncclReduceScatter(reinterpret_cast<const void*>(in),
                                         reinterpret_cast<void*>(mine), part, t, o, local_comm_, s);
    settle(local_comm_, r, "ncclReduceScatter (within the host)", deadline);
    r = n.ncclAllReduce(reinterpret_cast<const void*>(mine), reinterpret_cast<void*>(mine), part, t,
                        o, cross_comm_, s);
    settle(cross_comm_, r, "ncclAllReduce (across hosts)", deadline);
    // In place: NCCL allows sendbuff == recvbuff + rank * count.
    r = n.ncclAllGather(reinterpret_cast<const void*>(mine), reinterpret_cast<void*>(out), part, t,
                        local_comm_, s);
    settle(local_comm_, r, "ncclAllGather (within the host)", deadline);
  }
  size_t tail = count - part * L;
  if (tail > 0) {
    size_t off = part * L * esz;
    ncclResult_t r = n.ncclAllReduce(reinterpret_cast<const void*>(in + off),
                                     reinterpret_cast<void*>(out + off), tail, t, o, world_, s);
    settle(world_, r, "ncclAllReduce (tail)", deadline);
  }
}

void NcclComms::broadcast(CUdeviceptr buf, size_t count, DType dtype, int root,
                          TimePoint deadline) {
  PTC_CHECK_ARG(!failed_, "the NCCL communicator was aborted after an earlier error");
  ncclResult_t r =
      nccl().ncclBroadcast(reinterpret_cast<const void*>(buf), reinterpret_cast<void*>(buf), count,
                           nccl_type(dtype), root, world_, device_.stream());
  settle(world_, r, "ncclBroadcast", deadline);
}

void NcclComms::allgather(CUdeviceptr in, CUdeviceptr out, size_t count, DType dtype,
                          TimePoint deadline) {
  PTC_CHECK_ARG(!failed_, "the NCCL communicator was aborted after an earlier error");
  ncclResult_t r =
      nccl().ncclAllGather(reinterpret_cast<const void*>(in), reinterpret_cast<void*>(out), count,
                           nccl_type(dtype), world_, device_.stream());
  settle(world_, r, "ncclAllGather", deadline);
}

void NcclComms::reduce_scatter(CUdeviceptr in, CUdeviceptr out, size_t count_out, DType dtype,
                               ReduceOp op, TimePoint deadline) {
  PTC_CHECK_ARG(!failed_, "the NCCL communicator was aborted after an earlier error");
  ncclResult_t r = nccl().ncclReduceScatter(
      reinterpret_cast<const void*>(in), reinterpret_cast<void*>(out), count_out, nccl_type(dtype),
      nccl_op(op, dtype), world_, device_.stream());
  settle(world_, r, "ncclReduceScatter", deadline);
}

}  // namespace pytfcomm::gpu
