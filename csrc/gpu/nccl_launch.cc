#include "gpu/nccl_launch.h"

#include "common/error.h"
#include "gpu/cuda_driver.h"
#include "gpu/device.h"
#include "gpu/nccl_lib.h"

namespace pytfcomm::gpu {
namespace {

const void* cptr(CUdeviceptr p) { return reinterpret_cast<const void*>(p); }
void* ptr(CUdeviceptr p) { return reinterpret_cast<void*>(p); }

// Every member's tensors reduced over the group and the processes, in one
// group call (NCCL aggregates the M collectives of every GPU): all-reduced
// (parts == 1), or reduce-scattered into `parts` (count / parts out).
void enqueue_reduction(Group& g, ReduceOp op, size_t parts, const NcclRoute& route,
                       TimePoint deadline, const KeepAlive& keep_alive) {
  const NcclLib& lib = nccl();
  route.world->launch(
      op_label(g.call.op),
      [&](const ncclComm_t* comms) {
        for (size_t i = 0; i < g.members.size(); ++i) {
          const Member& m = g.members[i];
          for (const StreamTensor& t : m.tensors) {
            const size_t n = t.count / parts;
            if (n == 0) continue;
            const ncclDataType_t type = nccl_type(t.dtype);
            const ncclRedOp_t o = nccl_op(op, t.dtype);
            ncclResult_t r =
                parts == 1
                    ? lib.ncclAllReduce(cptr(t.in), ptr(t.out), n, type, o, comms[i], m.stream)
                    : lib.ncclReduceScatter(cptr(t.in), ptr(t.out), n, type, o, comms[i], m.stream);
            if (r != ncclSuccess && r != ncclInProgress) return r;
          }
        }
        return ncclSuccess;
      },
      deadline, keep_alive);
}

// One member: the root process's tensor lands in every `out`.
void enqueue_broadcast(Group& g, const NcclRoute& route, TimePoint deadline,
                       const KeepAlive& keep_alive) {
  const NcclLib& lib = nccl();
  const Member& m = g.members[0];
  const StreamTensor& t = m.tensors[0];
  route.world->launch(
      op_label(g.call.op),
      [&](const ncclComm_t* comms) {
        return lib.ncclBroadcast(cptr(t.in), ptr(t.out), t.count, nccl_type(t.dtype), g.call.root,
                                 comms[0], m.stream);
      },
      deadline, keep_alive);
}

// One member: its pieces, concatenated, from every process in rank order.
void enqueue_allgather(Group& g, int process_rank, const NcclRoute& route, TimePoint deadline,
                       const KeepAlive& keep_alive) {
  const NcclLib& lib = nccl();
  const Member& m = g.members[0];
  const DType dt = m.tensors[0].dtype;
  const size_t esz = dtype_size(dt);
  size_t local = 0;
  for (const StreamTensor& t : m.tensors) local += t.count;
  const CUdeviceptr out = m.tensors[0].out;
  CUdeviceptr mine = m.tensors[0].in;
  if (m.tensors.size() > 1) {
    // The pieces go to this process's slot of the output, then NCCL
    // gathers in place (sendbuff == recvbuff + rank * count is allowed).
    mine = out + static_cast<size_t>(process_rank) * local * esz;
    const CudaDriver& d = driver();
    ScopedContext scope(m.ctx);
    size_t off = 0;
    for (const StreamTensor& t : m.tensors) {
      if (t.count) {
        PTC_CU_CHECK(d.cuMemcpyDtoDAsync_v2(mine + off * esz, t.in, t.count * esz, m.stream));
      }
      off += t.count;
    }
  }
  route.world->launch(
      op_label(g.call.op),
      [&](const ncclComm_t* comms) {
        return lib.ncclAllGather(cptr(mine), ptr(out), local, nccl_type(dt), comms[0], m.stream);
      },
      deadline, keep_alive);
}

// What NCCL does not do, on each member's stream after its collective.
void finish_values(Group& g, Clique& clique, size_t parts) {
  const int64_t ranks = int64_t{clique.group_size()} * clique.processes();
  for (size_t i = 0; i < g.members.size(); ++i) {
    const Member& m = g.members[i];
    Device& dev = clique.device(static_cast<int>(i));
    ScopedContext scope(m.ctx);
    for (const StreamTensor& t : m.tensors) {
      const size_t n = t.count / parts;
      if (g.call.reduce == ReduceOp::kMean) dev.divide(t.out, n, t.dtype, ranks, m.stream);
      if (t.dtype == DType::kBool) dev.bool_normalize(t.out, n, m.stream);
    }
  }
}

}  // namespace

void enqueue_hierarchical(const Member& m, const StreamTensor& t, ReduceOp op,
                          const NcclRoute& route, TimePoint deadline, const KeepAlive& keep_alive) {
  const NcclLib& lib = nccl();
  const Clique::Levels& lv = route.levels;
  const size_t esz = dtype_size(t.dtype);
  const size_t L = static_cast<size_t>(lv.local_size);
  const size_t part = t.count / L;  // each local rank owns `part` elements
  const ncclDataType_t type = nccl_type(t.dtype);
  const ncclRedOp_t o = nccl_op(op, t.dtype);
  if (part > 0) {
    const CUdeviceptr mine = t.out + static_cast<size_t>(lv.local_rank) * part * esz;
    lv.local->launch(
        "ncclReduceScatter (within the host)",
        [&](const ncclComm_t* c) {
          return lib.ncclReduceScatter(cptr(t.in), ptr(mine), part, type, o, c[0], m.stream);
        },
        deadline, keep_alive);
    lv.cross->launch(
        "ncclAllReduce (across hosts)",
        [&](const ncclComm_t* c) {
          return lib.ncclAllReduce(cptr(mine), ptr(mine), part, type, o, c[0], m.stream);
        },
        deadline, keep_alive);
    // In place: NCCL allows sendbuff == recvbuff + rank * count.
    lv.local->launch(
        "ncclAllGather (within the host)",
        [&](const ncclComm_t* c) {
          return lib.ncclAllGather(cptr(mine), ptr(t.out), part, type, c[0], m.stream);
        },
        deadline, keep_alive);
  }
  const size_t tail = t.count - part * L;
  if (tail > 0) {
    const size_t off = part * L * esz;
    route.world->launch(
        "ncclAllReduce (tail)",
        [&](const ncclComm_t* c) {
          return lib.ncclAllReduce(cptr(t.in + off), ptr(t.out + off), tail, type, o, c[0],
                                   m.stream);
        },
        deadline, keep_alive);
  }
}

void enqueue_nccl(Group& g, Clique& clique, const NcclRoute& route, TimePoint deadline,
                  const KeepAlive& keep_alive) {
  // NCCL has no mean with pytfcomm's rounding: a sum, then one division.
  const ReduceOp op = g.call.reduce == ReduceOp::kMean ? ReduceOp::kSum : g.call.reduce;
  switch (g.call.op) {
    case StreamOp::kAllReduce:
      if (route.hierarchical()) {
        enqueue_hierarchical(g.members[0], g.members[0].tensors[0], op, route, deadline,
                             keep_alive);
      } else {
        enqueue_reduction(g, op, 1, route, deadline, keep_alive);
      }
      finish_values(g, clique, 1);
      break;
    case StreamOp::kReduceScatter: {
      const auto ranks = static_cast<size_t>(clique.group_size() * clique.processes());
      enqueue_reduction(g, op, ranks, route, deadline, keep_alive);
      finish_values(g, clique, ranks);
      break;
    }
    case StreamOp::kBroadcast:
      enqueue_broadcast(g, route, deadline, keep_alive);
      break;
    case StreamOp::kAllGather:
      enqueue_allgather(g, clique.process_rank(), route, deadline, keep_alive);
      break;
  }
}

}  // namespace pytfcomm::gpu
