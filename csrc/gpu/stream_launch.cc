#include "gpu/stream_group.h"

#include "common/error.h"
#include "common/reduce.h"
#include "gpu/cuda_driver.h"
#include "gpu/device.h"
#include "gpu/event_poller.h"
#include "gpu/nccl_lib.h"
#include "gpu/staging.h"
#include "local/local_reduce.h"

namespace pytfcomm::gpu {
namespace {

constexpr size_t kAlign = 64;

// Blocks until the member's stream has run what was enqueued so far (the
// staged path only, on an executor thread).
void stream_wait(const Member& m, TimePoint deadline, const char* what) {
  ScopedContext scope(m.ctx);
  Event e;
  e.record(m.stream);
  wait_event(e.get(), deadline, what);
}

// done(null) once everything enqueued so far on the member's stream has
// run; done(error) on an NCCL error or at the deadline (NCCL is aborted).
// `keep` (pinned staging memory) lives until the GPU is done with it.
void complete_after(Member& m, const std::shared_ptr<Clique>& clique, TimePoint deadline,
                    const char* what, std::shared_ptr<char> keep = nullptr) {
  const CudaDriver& d = driver();
  CUevent ev = nullptr;
  {
    ScopedContext scope(m.ctx);
    PTC_CU_CHECK(d.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    CUresult r = d.cuEventRecord(ev, m.stream);
    if (r != CUDA_SUCCESS) {
      d.cuEventDestroy_v2(ev);
      PTC_CU_CHECK(r);
    }
  }
  struct State {
    bool reported = false;
    TimePoint grace;
  };
  watch([ev, ctx = m.ctx, done = std::move(m.done), clique, deadline, what, keep = std::move(keep),
         st = State{}]() mutable {
    const CudaDriver& drv = driver();
    auto report = [&](std::exception_ptr e) {
      if (!st.reported) done(e);
      if (e && !st.reported) st.grace = Clock::now() + std::chrono::seconds(5);
      st.reported = true;
    };
    try {
      ScopedContext scope(ctx);
      CUresult r = drv.cuEventQuery(ev);
      if (r == CUDA_ERROR_NOT_READY) {
        // After an error the op has been answered; wait (a while) only so
        // that staging memory is not reused under a copy still in flight.
        if (st.reported) {
          if (Clock::now() < st.grace) return false;
          drv.cuEventDestroy_v2(ev);
          return true;
        }
        if (clique) clique->check(what);
        if (Clock::now() < deadline) return false;
        std::string msg = str_cat("timed out in ", what,
                                  " on the GPU (NCCL was aborted): a worker or local replica did "
                                  "not join in time, hung, or is slower than PYTFCOMM_TIMEOUT");
        if (clique) clique->fail(msg);
        report(error_ptr(ErrorKind::kTimeout, msg));
        return false;
      }
      if (r != CUDA_SUCCESS) {
        std::string msg = str_cat("CUDA failed during ", what, ": ", cu_error_text(r));
        if (clique) clique->fail(msg);
        report(error_ptr(ErrorKind::kInternal, msg));
      } else {
        report(nullptr);
      }
      drv.cuEventDestroy_v2(ev);
      return true;
    } catch (...) {
      report(std::current_exception());
      return false;  // keep polling the event until the grace period ends
    }
  });
}

}  // namespace

const char* op_label(StreamOp op) {
  return op == StreamOp::kAllReduce   ? "GPU all-reduce"
         : op == StreamOp::kBroadcast ? "GPU broadcast"
                                      : "GPU all-gather";
}

void finish(Member& m, std::exception_ptr e) {
  if (!m.done) return;
  StreamDone d = std::move(m.done);
  m.done = nullptr;
  d(e);
}

void run_nccl(Group& g, const std::shared_ptr<Clique>& clique, TimePoint deadline) {
  const NcclLib& lib = nccl();
  const CudaDriver& d = driver();
  const StreamCall& call = g.call;
  const int n = clique->group_size();
  const int p = clique->processes();
  const char* what = op_label(call.op);
  if (call.op == StreamOp::kAllReduce) {
    // NCCL has no mean with pytfcomm's rounding: a sum, then one division.
    const ReduceOp op = call.reduce == ReduceOp::kMean ? ReduceOp::kSum : call.reduce;
    // One group call: NCCL aggregates the M all-reduces of every GPU.
    clique->launch(
        what,
        [&](const ncclComm_t* comms) {
          for (int i = 0; i < n; ++i) {
            const Member& m = g.members[static_cast<size_t>(i)];
            for (const StreamTensor& t : m.tensors) {
              if (t.count == 0) continue;
              ncclResult_t r = lib.ncclAllReduce(
                  reinterpret_cast<const void*>(t.in), reinterpret_cast<void*>(t.out), t.count,
                  nccl_type(t.dtype), nccl_op(op, t.dtype), comms[i], m.stream);
              if (r != ncclSuccess && r != ncclInProgress) return r;
            }
          }
          return ncclSuccess;
        },
        deadline);
    for (int i = 0; i < n; ++i) {
      Member& m = g.members[static_cast<size_t>(i)];
      ScopedContext scope(m.ctx);
      for (const StreamTensor& t : m.tensors) {
        if (call.reduce == ReduceOp::kMean) {
          clique->device(i).divide(t.out, t.count, t.dtype, int64_t{n} * p, m.stream);
        }
        if (t.dtype == DType::kBool) clique->device(i).bool_normalize(t.out, t.count, m.stream);
      }
    }
  } else {
    Member& m = g.members[0];
    const DType dt = m.tensors[0].dtype;
    const size_t esz = dtype_size(dt);
    if (call.op == StreamOp::kBroadcast) {
      const StreamTensor& t = m.tensors[0];
      clique->launch(
          what,
          [&](const ncclComm_t* comms) {
            return lib.ncclBroadcast(reinterpret_cast<const void*>(t.in),
                                     reinterpret_cast<void*>(t.out), t.count, nccl_type(dt),
                                     call.root, comms[0], m.stream);
          },
          deadline);
    } else {
      // This process's pieces go to its slot of the output, then NCCL
      // gathers in place (sendbuff == recvbuff + rank * count is allowed).
      size_t local = 0;
      for (const StreamTensor& t : m.tensors) local += t.count;
      const CUdeviceptr out = m.tensors[0].out;
      const CUdeviceptr mine = out + static_cast<size_t>(clique->process_rank()) * local * esz;
      {
        ScopedContext scope(m.ctx);
        size_t off = 0;
        for (const StreamTensor& t : m.tensors) {
          if (t.count) {
            PTC_CU_CHECK(d.cuMemcpyDtoDAsync_v2(mine + off * esz, t.in, t.count * esz, m.stream));
          }
          off += t.count;
        }
      }
      clique->launch(
          what,
          [&](const ncclComm_t* comms) {
            return lib.ncclAllGather(reinterpret_cast<const void*>(mine),
                                     reinterpret_cast<void*>(out), local, nccl_type(dt), comms[0],
                                     m.stream);
          },
          deadline);
    }
  }
  if (p > 1) count(CounterKind::kCrossWorkerOps);
  for (Member& m : g.members) complete_after(m, clique, deadline, what);
}

void run_staged(Group& g, const std::shared_ptr<Clique>& clique, TimePoint deadline) {
  const CudaDriver& d = driver();
  const StreamCall& call = g.call;
  Communicator* c = clique->comm();
  const int n = clique->group_size();
  const int p = clique->processes();
  const char* what = op_label(call.op);
  const auto& first = g.members[0].tensors;
  std::vector<size_t> off;
  size_t total = 0;
  for (const StreamTensor& t : first) {
    off.push_back(total);
    total += (t.count * dtype_size(t.dtype) + kAlign - 1) / kAlign * kAlign;
  }
  // Copy every member's inputs out (the gather's pieces back to back).
  std::vector<std::shared_ptr<char>> host(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    Member& m = g.members[static_cast<size_t>(i)];
    ScopedContext scope(m.ctx);
    host[static_cast<size_t>(i)] = pinned_block(total);
    const bool send = call.op != StreamOp::kBroadcast || clique->process_rank() == call.root;
    for (size_t j = 0; send && j < m.tensors.size(); ++j) {
      const StreamTensor& t = m.tensors[j];
      if (t.count == 0) continue;
      size_t at = call.op == StreamOp::kAllGather ? 0 : off[j];
      for (size_t k = 0; call.op == StreamOp::kAllGather && k < j; ++k) {
        at += m.tensors[k].count * dtype_size(t.dtype);
      }
      PTC_CU_CHECK(d.cuMemcpyDtoHAsync_v2(host[static_cast<size_t>(i)].get() + at, t.in,
                                          t.count * dtype_size(t.dtype), m.stream));
    }
    stream_wait(m, deadline, "staging copy-out");
  }
  std::shared_ptr<char> result;
  std::vector<std::pair<size_t, size_t>> back;  // (host offset, bytes) per output
  {
    ScopedContext scope(g.members[0].ctx);
    if (call.op == StreamOp::kAllReduce) {
      result = pinned_block(total);
      std::vector<ReduceSpan> spans;
      for (size_t j = 0; j < first.size(); ++j) {
        ReduceSpan s;
        for (auto& h : host) s.inputs.push_back(h.get() + off[j]);
        s.out = result.get() + off[j];
        s.count = first[j].count;
        s.dtype = first[j].dtype;
        spans.push_back(std::move(s));
      }
      const bool mean = call.reduce == ReduceOp::kMean;
      local_reduce(spans, mean && p > 1 ? ReduceOp::kSum : call.reduce, n);
      for (size_t j = 0; p > 1 && j < first.size(); ++j) {
        void* buf = result.get() + off[j];
        c->allreduce(buf, buf, first[j].count, first[j].dtype, mean ? ReduceOp::kSum : call.reduce,
                     call.algorithm, seconds_left(deadline));
        if (mean) divide(buf, buf, first[j].count, first[j].dtype, int64_t{n} * p);
      }
      for (size_t j = 0; j < first.size(); ++j) {
        back.emplace_back(off[j], first[j].count * dtype_size(first[j].dtype));
      }
    } else if (call.op == StreamOp::kBroadcast) {
      result = host[0];
      c->broadcast(result.get(), first[0].count, first[0].dtype, call.root, seconds_left(deadline));
      back.emplace_back(0, first[0].count * dtype_size(first[0].dtype));
    } else {
      size_t local = 0;
      for (const StreamTensor& t : first) local += t.count;
      const size_t esz = dtype_size(first[0].dtype);
      result = pinned_block(local * esz * static_cast<size_t>(p));
      c->allgather(host[0].get(), result.get(), local, first[0].dtype, seconds_left(deadline));
      back.emplace_back(0, local * esz * static_cast<size_t>(p));
    }
  }
  if (p > 1) count(CounterKind::kCrossWorkerOps);
  // Copy the result into every member's outputs; done once they landed.
  for (Member& m : g.members) {
    ScopedContext scope(m.ctx);
    for (size_t j = 0; j < back.size(); ++j) {
      if (back[j].second == 0) continue;
      PTC_CU_CHECK(d.cuMemcpyHtoDAsync_v2(m.tensors[j].out, result.get() + back[j].first,
                                          back[j].second, m.stream));
    }
    complete_after(m, clique, deadline, what, result);
  }
}

}  // namespace pytfcomm::gpu
