#include "gpu/gpu_comm.h"

#include "common/error.h"
#include "common/logging.h"
#include "gpu/clique.h"
#include "gpu/cuda_driver.h"
#include "gpu/device.h"
#include "gpu/gpu_call.h"
#include "gpu/gpu_collective.h"
#include "gpu/staging.h"

namespace pytfcomm::gpu {

GpuCommunicator::GpuCommunicator(std::shared_ptr<Communicator> comm) : comm_(std::move(comm)) {
  gpu_params();  // a malformed PYTFCOMM_GPU_* fails here, before any collective
}

GpuCommunicator::~GpuCommunicator() { close(); }

void GpuCommunicator::close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  // After an error (a peer lost: pytfcomm.elastic.reform() closes the old
  // communicator and makes a new one) NCCL is aborted, never finalized and
  // destroyed: finalizing flushes work with peers that may be gone (bounded,
  // but seconds), and NCCL's recovery from an error is ncclCommAbort. Where
  // NCCL has ncclCommShrink the world communicator is kept instead (revoked)
  // for the next communicator's shrink (gpu/nccl_reform.h). A GPU
  // collective that failed has aborted it already; this covers a host
  // collective (or another thread) that saw the failure first.
  if (clique_ && !clique_->failed()) {
    std::string why = failure_.empty() ? comm_->failure() : failure_;
    if (!why.empty()) clique_->abort_nccl(str_cat("the communicator failed: ", why));
  }
  // Order: staging uses the device's context and streams, which the clique owns.
  stager_.reset();
  clique_.reset();
}

std::string GpuCommunicator::last_backend() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_ == Backend::kAuto ? "" : backend_name(last_);
}

std::pair<uint64_t, uint64_t> GpuCommunicator::verify_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!clique_) return {0, 0};
  return {clique_->verify_cache().compact_checks(), clique_->verify_cache().full_rounds()};
}

Clique& GpuCommunicator::clique_for(int ordinal) {
  if (!clique_) clique_ = std::make_shared<Clique>(comm_, std::vector<int>{ordinal}, true);
  const int mine = clique_->device(0).ordinal();
  PTC_CHECK_ARG(mine == ordinal, "the tensor is on cuda:", ordinal,
                " but this communicator's GPU collectives run on cuda:", mine,
                "; keep one GPU per rank (or use one communicator per GPU)");
  return *clique_;
}

void GpuCommunicator::check_open() const {
  if (closed_) {
    PTC_THROW(kClosed,
              failure_.empty() ? "this communicator is closed"
                               : "this communicator was closed after an earlier error: ",
              failure_, "; create a new one with pytfcomm.init()");
  }
  if (comm_->closed())
    PTC_THROW(kClosed, "this communicator is closed; create a new one with init()");
}

uintptr_t GpuCommunicator::stream(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  check_open();
  return reinterpret_cast<uintptr_t>(clique_for(device).device(0).stream());
}

void GpuCommunicator::run(const Call& call, const DeviceBuffer& in, const DeviceBuffer& out,
                          const Staged& staged) {
  std::lock_guard<std::mutex> lock(mu_);
  check_open();
  Device& dev = clique_for(in.device).device(0);
  ScopedContext scope(dev.context());
  Group g;
  g.call.op = call.op;
  g.call.reduce = call.reduce;
  g.call.algorithm = call.algorithm;
  g.call.root = call.root;
  g.call.timeout_s = call.timeout_s;
  g.call.comm = comm_;
  g.backend = call.backend;
  g.shape_tag = call.shape_tag;
  g.nccl_hierarchical =
      call.op == StreamOp::kAllReduce && call.algorithm == Algorithm::kHierarchical;
  g.staged_carries_digest = true;
  Member m;
  m.stream = dev.stream();
  m.ctx = dev.context();
  m.device = dev.ordinal();
  m.tensors.push_back(StreamTensor{in.ptr, out.ptr, in.count, in.dtype});
  g.members.push_back(std::move(m));
  try {
    last_ = run_collective(g, clique_, Completion::kWait, [&](TimePoint deadline, uint32_t tag) {
      if (!stager_) {
        stager_ = std::make_unique<Stager>(dev, static_cast<size_t>(gpu_params().stage_bytes));
      }
      staged(*stager_, dev, deadline, tag);
    });
  } catch (const std::exception& e) {
    if (keeps_ranks_in_step(e)) throw;  // nothing moved
    const auto* err = dynamic_cast<const Error*>(&e);
    // run_collective failed the clique: NCCL aborted, the communicator
    // closed on every rank. This object says why from now on.
    failure_ = str_cat(error_kind_name(err ? err->kind() : ErrorKind::kInternal), " error in ",
                       op_label(call.op), ": ", e.what());
    PTC_LOG(kError, failure_);
    closed_ = true;
    throw;
  }
}

void GpuCommunicator::allreduce(const DeviceBuffer& in, const DeviceBuffer& out, ReduceOp op,
                                Algorithm algorithm, Backend backend, double timeout_s,
                                uint32_t shape_tag) {
  PTC_CHECK_ARG(in.dtype != DType::kBool || op != ReduceOp::kMean,
                "op 'mean' is not defined for bool; use 'max' (any) or 'min' (all)");
  if (algorithm == Algorithm::kHierarchical) {
    PTC_CHECK_ARG(comm_->uniform_hosts(),
                  "hierarchical all-reduce needs the same number of ranks on every host; this job "
                  "has uneven hosts: use algorithm='ring' or 'auto'");
  }
  run(Call{StreamOp::kAllReduce, op, algorithm, 0, backend, timeout_s, shape_tag}, in, out,
      [&](Stager& s, Device&, TimePoint deadline, uint32_t tag) {
        s.allreduce(*comm_, in.ptr, out.ptr, in.count, in.dtype, op, algorithm, deadline, tag);
      });
}

void GpuCommunicator::broadcast(const DeviceBuffer& in, const DeviceBuffer& out, int root,
                                Backend backend, double timeout_s, uint32_t shape_tag) {
  PTC_CHECK_ARG(root >= 0 && root < comm_->size(), "root must be a rank in [0, ", comm_->size(),
                "), got ", root);
  run(Call{StreamOp::kBroadcast, ReduceOp::kSum, Algorithm::kAuto, root, backend, timeout_s,
           shape_tag},
      in, out, [&](Stager& s, Device& dev, TimePoint deadline, uint32_t tag) {
        if (comm_->rank() == root && in.ptr != out.ptr) {
          PTC_CU_CHECK(driver().cuMemcpyDtoDAsync_v2(
              out.ptr, in.ptr, in.count * dtype_size(in.dtype), dev.stream()));
        }
        s.broadcast(*comm_, out.ptr, out.count, out.dtype, root, deadline, tag);
      });
}

void GpuCommunicator::allgather(const DeviceBuffer& in, const DeviceBuffer& out, Backend backend,
                                double timeout_s, uint32_t shape_tag) {
  run(Call{StreamOp::kAllGather, ReduceOp::kSum, Algorithm::kAuto, 0, backend, timeout_s,
           shape_tag},
      in, out, [&](Stager& s, Device&, TimePoint deadline, uint32_t tag) {
        s.allgather(*comm_, in.ptr, out.ptr, in.count, in.dtype, deadline, tag);
      });
}

void GpuCommunicator::reduce_scatter(const DeviceBuffer& in, const DeviceBuffer& out, ReduceOp op,
                                     Backend backend, double timeout_s, uint32_t shape_tag) {
  PTC_CHECK_ARG(in.dtype != DType::kBool || op != ReduceOp::kMean,
                "op 'mean' is not defined for bool");
  PTC_CHECK_ARG(in.count % static_cast<size_t>(comm_->size()) == 0,
                "reduce_scatter needs a length divisible by the number of ranks (", comm_->size(),
                "), got ", in.count, " elements");
  run(Call{StreamOp::kReduceScatter, op, Algorithm::kAuto, 0, backend, timeout_s, shape_tag}, in,
      out, [&](Stager& s, Device&, TimePoint deadline, uint32_t tag) {
        s.reduce_scatter(*comm_, in.ptr, out.ptr, in.count, in.dtype, op, deadline, tag);
      });
}

}  // namespace pytfcomm::gpu
