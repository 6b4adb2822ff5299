#include "gpu/gpu_collective.h"

#include "common/error.h"
#include "common/logging.h"
#include "common/param.h"
#include "engine/communicator.h"
#include "engine/external.h"
#include "gpu/completion.h"
#include "gpu/nccl_launch.h"
#include "gpu/verify_cache.h"
#include "local/local_reduce.h"
#include "observe/timeline.h"

namespace pytfcomm::gpu {
namespace {

// The NCCL half of a collective, as the engine runs it at its turn.
class NcclRun final : public ExternalCollective {
 public:
  NcclRun(Group& g, std::shared_ptr<Clique> clique, NcclRoute route, Completion how)
      : g_(g), clique_(std::move(clique)), route_(route), how_(how) {}

  const char* algorithm() const override {
    return route_.hierarchical() ? "nccl_hierarchical" : "nccl";
  }

  void run(const ExternalRun& r) override {
    const char* what = op_label(g_.call.op);
    Phase launch(r.tracer, "nccl_launch");
    enqueue_nccl(g_, *clique_, route_, r.deadline, r.keep_alive);
    if (clique_->processes() > 1) count(CounterKind::kCrossWorkerOps);
    launch.end();
    if (how_ == Completion::kWait) {
      Phase wait(r.tracer, "gpu_wait");
      for (const Member& m : g_.members) {
        wait_member(m, clique_.get(), r.deadline, what, r.keep_alive);
      }
    } else {
      for (Member& m : g_.members) complete_after(m, clique_, r.deadline, what);
    }
  }

 private:
  // A timeline phase (no-op without a tracer).
  class Phase {
   public:
    Phase(algorithms::Tracer* t, const char* name) : t_(t) {
      if (t_) t_->phase_begin(name, -1);
    }
    ~Phase() { end(); }
    void end() {
      if (t_) t_->phase_end();
      t_ = nullptr;
    }

   private:
    algorithms::Tracer* t_;
  };

  Group& g_;
  std::shared_ptr<Clique> clique_;
  NcclRoute route_;
  Completion how_;
};

size_t elements(const Group& g) {
  size_t n = 0;
  for (const StreamTensor& t : g.members[0].tensors) n += t.count;
  return n;
}

// Through the engine: negotiated, ordered, timed and traced.
void run_negotiated(Communicator& comm, Group& g, NcclRun& body, uint32_t digest) {
  const StreamCall& c = g.call;
  std::unique_ptr<Request> r = comm.make_request(
      collective_kind(c.op), nullptr, nullptr, elements(g), g.members[0].tensors[0].dtype, c.reduce,
      c.algorithm, c.op == StreamOp::kBroadcast ? c.root : 0, c.timeout_s, digest);
  r->external = &body;
  Request* one = r.get();
  comm.run_requests(&one, 1);
  if (r->error()) std::rethrow_exception(r->error());
}

// While a call outside the rounds waits: the host side's liveness, so that a
// lost peer fails it as it fails a call in a round (engine/external.h).
std::function<void()> watch_peers(Communicator* comm) {
  if (comm == nullptr) return nullptr;
  return [comm] { comm->watch_peers(); };
}

// At once, on this thread (PYTFCOMM_GPU_VERIFY=0, a call the compact check
// confirmed, or no other process); the timeline still gets the collective.
void run_direct(Communicator* comm, Group& g, NcclRun& body, uint32_t digest, TimePoint deadline) {
  Timeline* tl = comm ? comm->timeline() : nullptr;
  const int64_t t0 = tl ? Timeline::now_ns() : 0;
  bool failed = true;
  try {
    body.run(ExternalRun{deadline, nullptr, watch_peers(comm)});
    failed = false;
  } catch (...) {
    if (!tl) throw;
  }
  if (tl) {
    transport::MessageMeta meta;
    meta.kind = static_cast<uint8_t>(collective_kind(g.call.op));
    meta.dtype = static_cast<uint8_t>(g.members[0].tensors[0].dtype);
    meta.op = static_cast<uint8_t>(g.call.reduce);
    meta.root = g.call.root;
    meta.count = elements(g);
    meta.shape_tag = digest;
    tl->add_collective(meta, kind_name(collective_kind(g.call.op)), body.algorithm(),
                       algorithm_name(g.call.algorithm),
                       meta.count * dtype_size(g.members[0].tensors[0].dtype), t0,
                       Timeline::now_ns(), failed);
    if (failed) throw;
  }
}

// One byte over the host transport whose frame metadata carries `digest`:
// processes that disagree fail here, before anything is staged.
void agree(Communicator& comm, uint32_t digest, TimePoint deadline) {
  uint8_t b = 0;
  comm.allreduce(&b, &b, 1, DType::kUInt8, ReduceOp::kMax, Algorithm::kAuto, seconds_left(deadline),
                 digest);
}

}  // namespace

TimePoint deadline_of(const StreamCall& c) {
  if (c.timeout_s > 0) return deadline_after(c.timeout_s);
  return deadline_after(c.comm ? c.comm->default_timeout_s() : params().timeout_s);
}

Backend run_collective(Group& g, const std::shared_ptr<Clique>& clique, Completion how,
                       const std::function<void(TimePoint deadline, uint32_t digest)>& staged) {
  Clique& c = *clique;
  const char* what = op_label(g.call.op);
  const TimePoint deadline = deadline_of(g.call);
  try {
    try {
      check_members(g);
      c.check(what);
      // PYTFCOMM_GPU_TRANSPORT, when set, wins over what the caller asked for.
      if (gpu_params().transport != Backend::kAuto) g.backend = gpu_params().transport;
      const uint32_t digest = call_digest(g);
      const bool negotiate = c.processes() > 1 && gpu_params().verify;
      const Backend b = c.backend(g.backend, deadline, digest);
      PTC_LOG(kDebug, what, " of ", elements(g), " x ", dtype_name(g.members[0].tensors[0].dtype),
              " on ", g.members.size(), " GPU(s) via ", backend_name(b));
      if (b == Backend::kStaged) {
        // A body whose chunks carry the digest checks it in its first host
        // collective, before any result is copied back; with no elements it
        // moves no chunk, so one byte carries the digest instead.
        if (negotiate && (!g.staged_carries_digest || elements(g) == 0)) {
          agree(*c.comm(), digest, deadline);
        }
        staged(deadline, digest);
        return b;
      }
      // NCCL set-up uses the Communicator: before the engine's turn.
      NcclRoute route;
      route.world = &c.world(deadline, digest);
      if (g.nccl_hierarchical && c.processes() > 1) {
        route.levels = c.hierarchy(deadline, digest);
      }
      NcclRun body(g, clique, route, how);
      // The DLPack path (one call at a time, one GPU) may confirm a call
      // agreed before with the compact check instead of the full round.
      const bool compact = negotiate && how == Completion::kWait && g.members.size() == 1 &&
                           gpu_params().verify_cache;
      uint64_t key = 0;
      if (compact) {
        key = call_key(g);
        if (c.verify_cache().confirm(key, c, *route.world, g.members[0], deadline,
                                     watch_peers(c.comm()))) {
          run_direct(c.comm(), g, body, digest, deadline);
          return b;
        }
      }
      if (negotiate) {
        run_negotiated(*c.comm(), g, body, digest);
        if (compact) c.verify_cache().remember(key);
      } else {
        run_direct(c.comm(), g, body, digest, deadline);
      }
      return b;
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kMismatch) throw;
      PTC_THROW(kMismatch, "workers ran different ", what,
                "s (operation, tensors, counts, dtypes, op, root, algorithm, transport, shape or "
                "number of GPUs differ): ",
                e.what());
    }
  } catch (const std::exception& e) {
    // Anything else leaves the processes out of step: fail the backend on
    // every rank (peers see the connections close).
    if (!keeps_ranks_in_step(e)) c.fail(e.what());
    throw;
  }
}

bool keeps_ranks_in_step(const std::exception& e) {
  const auto* err = dynamic_cast<const Error*>(&e);
  return err && (err->kind() == ErrorKind::kInvalidArgument || err->kind() == ErrorKind::kMismatch);
}

}  // namespace pytfcomm::gpu
