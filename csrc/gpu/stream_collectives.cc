#include "gpu/stream_collectives.h"

#include <cuda.h>

#include <map>
#include <mutex>
#include <tuple>

#include "common/error.h"
#include "common/param.h"
#include "gpu/clique.h"
#include "gpu/cuda_driver.h"
#include "gpu/device.h"
#include "gpu/event_poller.h"
#include "gpu/gpu_call.h"
#include "gpu/gpu_collective.h"
#include "gpu/stream_staged.h"
#include "local/executor.h"

namespace pytfcomm::gpu {
namespace {

using GroupKey = std::tuple<int64_t, int64_t, uint64_t>;  // handle, group key, sequence

// The stream's context and device. TF's streams live in each device's
// primary context, the one pytfcomm's Device uses too.
void bind_stream(Member& m, void* stream) {
  const CudaDriver& d = driver();  // kConfig when there is no usable GPU
  m.stream = static_cast<CUstream>(stream);
  PTC_CU_CHECK(d.cuStreamGetCtx(m.stream, &m.ctx));
  ScopedContext scope(m.ctx);
  CUdevice dev = 0;
  PTC_CU_CHECK(d.cuCtxGetDevice(&dev));
  m.device = static_cast<int>(dev);  // device handles are ordinals
}

// On the executor thread of the group's communicator.
void run(Group& g) {
  std::shared_ptr<Clique> clique;
  try {
    std::vector<int> devices;
    for (const Member& m : g.members) devices.push_back(m.device);
    clique = find_clique(g.call.comm ? g.call.comm_handle : 0, g.call.comm, devices);
    run_collective(g, clique, Completion::kCallbacks,
                   [&](TimePoint deadline, uint32_t) { run_staged(g, clique, deadline); });
  } catch (...) {
    // run_collective failed the clique already (unless the arguments were
    // bad); the members that were not handed on hear it now.
    std::exception_ptr e = std::current_exception();
    for (Member& m : g.members) finish(m, e);
  }
}

void dispatch(std::shared_ptr<Group> g) {
  Executor::for_communicator(g->call.comm ? g->call.comm_handle : 0).enqueue([g] { run(*g); });
}

// Groups waiting for members, and per (handle, key, member) how many times
// that member ran: its k-th run joins the group's k-th collective. Never
// destroyed (the poller may still look at it during static destruction).
struct Rendezvous {
  std::mutex mu;
  std::map<GroupKey, std::shared_ptr<Group>> groups;
  std::map<std::tuple<int64_t, int64_t, int>, uint64_t> runs;
};

Rendezvous& rendezvous() {
  static auto* r = new Rendezvous();
  return *r;
}

void arrive(Member m, const StreamCall& call) {
  const int64_t handle = call.comm ? call.comm_handle : 0;
  Rendezvous& rv = rendezvous();
  std::shared_ptr<Group> g;
  GroupKey key;
  bool fresh = false;
  bool ready = false;
  bool clash = false;
  {
    std::lock_guard<std::mutex> lock(rv.mu);
    key = {handle, call.group_key, rv.runs[{handle, call.group_key, call.group_rank}]++};
    std::shared_ptr<Group>& slot = rv.groups[key];
    if (!slot) {
      slot = std::make_shared<Group>();
      slot->call = call;
      slot->members.resize(static_cast<size_t>(call.group_size));
      slot->deadline = deadline_of(call);  // gpu/gpu_collective.h
      fresh = true;
    }
    g = slot;
    Member& seat = g->members[static_cast<size_t>(call.group_rank)];
    clash = g->call.group_size != call.group_size || static_cast<bool>(seat.done);
    if (!clash) {
      seat = std::move(m);
      ready = ++g->arrived == call.group_size;
      if (ready) {
        g->closed = true;
        rv.groups.erase(key);
      }
    }
  }
  if (clash) {
    return finish(m, error_ptr(ErrorKind::kInvalidArgument,
                               str_cat("two GPU all-reduce ops share group key ", call.group_key,
                                       " with different group sizes or ranks; each group of ops "
                                       "needs its own key")));
  }
  if (ready) return dispatch(g);
  if (!fresh) return;
  // A replica that never runs its op must not hang the others forever.
  watch([g, key] {
    std::vector<Member> waiting;
    {
      Rendezvous& rv = rendezvous();
      std::lock_guard<std::mutex> lock(rv.mu);
      if (g->closed) return true;
      if (Clock::now() < g->deadline) return false;
      g->closed = true;
      rv.groups.erase(key);
      for (Member& m : g->members) {
        if (m.done) waiting.push_back(std::move(m));
      }
    }
    auto e = error_ptr(ErrorKind::kTimeout,
                       str_cat("only ", waiting.size(), " of ", g->call.group_size,
                               " local GPUs reached the ", op_label(g->call.op),
                               " before the deadline: every replica must run it (each step, in "
                               "the same order); raise PYTFCOMM_TIMEOUT if one is just slow"));
    for (Member& m : waiting) finish(m, e);
    return true;
  });
}

}  // namespace

void enqueue_on_stream(void* cu_stream, StreamCall call, std::vector<StreamTensor> tensors,
                       StreamDone done) noexcept {
  Member m;
  try {
    PTC_CHECK_ARG(call.group_size >= 1 && call.group_rank >= 0 && call.group_rank < call.group_size,
                  "group_rank ", call.group_rank, " is not in [0, group_size=", call.group_size,
                  ")");
    PTC_CHECK_ARG(call.group_size == 1 || call.op == StreamOp::kAllReduce,
                  "only the all-reduce runs as a group of GPUs");
    PTC_CHECK_ARG(!tensors.empty(), "a GPU collective needs at least one tensor");
    if (call.comm && call.comm->size() == 1) call.comm = nullptr;
    bind_stream(m, cu_stream);
    m.tensors = std::move(tensors);
  } catch (...) {
    return done(std::current_exception());
  }
  m.done = std::move(done);
  try {
    if (call.op == StreamOp::kAllGather && !call.comm) {
      // Only this process: the concatenation is stream-ordered copies, and
      // later ops on the stream see it; nothing to wait for.
      const CudaDriver& d = driver();
      ScopedContext scope(m.ctx);
      size_t off = 0;
      for (const StreamTensor& t : m.tensors) {
        const size_t bytes = t.count * dtype_size(t.dtype);
        if (bytes != 0) {
          PTC_CU_CHECK(d.cuMemcpyDtoDAsync_v2(m.tensors[0].out + off, t.in, bytes, m.stream));
        }
        off += bytes;
      }
      return finish(m, nullptr);
    }
    if (call.group_size == 1) {
      auto g = std::make_shared<Group>();
      g->call = std::move(call);
      g->members.push_back(std::move(m));
      g->arrived = 1;
      return dispatch(std::move(g));
    }
    arrive(std::move(m), call);
  } catch (...) {
    finish(m, std::current_exception());
  }
}

}  // namespace pytfcomm::gpu
