#include "gpu/gpu_comm.h"

#include <vector>

#include "common/digest.h"
#include "common/error.h"
#include "common/logging.h"
#include "common/param.h"
#include "gpu/cuda_driver.h"
#include "gpu/device.h"
#include "gpu/nccl_comms.h"
#include "gpu/nccl_lib.h"
#include "gpu/staging.h"

namespace pytfcomm::gpu {
namespace {

// FNV-1a over the fields every rank must agree on.
uint32_t digest(std::initializer_list<uint64_t> fields) {
  FieldDigest32 d;
  for (uint64_t f : fields) d.mix(f);
  return d.nonzero();  // 0 means "no shape" on the wire
}

}  // namespace

GpuCommunicator::GpuCommunicator(std::shared_ptr<Communicator> comm) : comm_(std::move(comm)) {
  gpu_params();  // a malformed PYTFCOMM_GPU_* fails here, before any collective
}

GpuCommunicator::~GpuCommunicator() { close(); }

void GpuCommunicator::close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  // Order: NCCL and staging use the device's context and streams.
  nccl_.reset();
  stager_.reset();
  device_.reset();
}

std::string GpuCommunicator::last_backend() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_ == Backend::kAuto ? "" : backend_name(last_);
}

Device& GpuCommunicator::device_for(int ordinal) {
  if (!device_) device_ = std::make_unique<Device>(ordinal);
  PTC_CHECK_ARG(device_->ordinal() == ordinal, "the tensor is on cuda:", ordinal,
                " but this communicator's GPU collectives run on cuda:", device_->ordinal(),
                "; keep one GPU per rank (or use one communicator per GPU)");
  return *device_;
}

uintptr_t GpuCommunicator::stream(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  PTC_CHECK_ARG(!closed_, "this communicator is closed");
  return reinterpret_cast<uintptr_t>(device_for(device).stream());
}

Backend GpuCommunicator::resolve(Backend requested, TimePoint deadline) {
  if (requested == Backend::kStaged) return requested;
  if (nccl_everywhere_ < 0) {
    // Every rank says whether it could load NCCL; all must agree to use it.
    NcclStatus st = nccl_status();
    uint8_t mine = st.loaded ? 1 : 0;
    std::vector<uint8_t> all(static_cast<size_t>(comm_->size()));
    comm_->allgather(&mine, all.data(), 1, DType::kUInt8, seconds_left(deadline));
    std::string missing;
    for (size_t r = 0; r < all.size(); ++r) {
      if (!all[r]) missing += str_cat(missing.empty() ? "" : ", ", r);
    }
    nccl_everywhere_ = missing.empty() ? 1 : 0;
    if (!missing.empty()) {
      nccl_missing_ = str_cat("NCCL is missing on rank(s) ", missing,
                              st.loaded ? "" : str_cat(" (here: ", st.error, ")"));
      PTC_LOG(kInfo, nccl_missing_, "; GPU tensors are staged through host memory");
    }
  }
  if (nccl_everywhere_ == 1) return Backend::kNccl;
  if (requested == Backend::kNccl) {
    PTC_THROW(kConfig, "transport 'nccl' was asked for but ", nccl_missing_,
              "; install nvidia-nccl-cu13 (or -cu12) everywhere, or use "
              "PYTFCOMM_GPU_TRANSPORT=staged");
  }
  return Backend::kStaged;
}

void GpuCommunicator::verify(uint32_t tag, TimePoint deadline) {
  // One byte over the host transport whose frame metadata carries `tag`:
  // ranks that disagree fail there, with a MismatchError, before NCCL runs.
  uint8_t b = 0;
  try {
    comm_->allreduce(&b, &b, 1, DType::kUInt8, ReduceOp::kMax, Algorithm::kAuto,
                     seconds_left(deadline), tag);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kMismatch) throw;
    PTC_THROW(kMismatch,
              "ranks called different GPU collectives (operation, dtype, count, op, root, "
              "algorithm, transport or shape differ): ",
              e.what());
  }
}

template <typename Body>
void GpuCommunicator::run(const char* name, int kind, const DeviceBuffer& in, ReduceOp op, int root,
                          int algorithm, Backend backend, double timeout_s, uint32_t shape_tag,
                          Body body) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) {
    PTC_THROW(kClosed,
              failure_.empty() ? "this communicator is closed"
                               : "this communicator was closed after an earlier error: ",
              failure_, "; create a new one with pytfcomm.init()");
  }
  PTC_CHECK_ARG(!comm_->closed(), "this communicator is closed; create a new one with init()");
  TimePoint deadline = deadline_after(timeout_s > 0 ? timeout_s : params().timeout_s);
  // PYTFCOMM_GPU_TRANSPORT, when set, wins over what the caller derived from
  // init(transport=...).
  if (gpu_params().transport != Backend::kAuto) backend = gpu_params().transport;
  Device& dev = device_for(in.device);
  ScopedContext scope(dev.context());
  try {
    if (gpu_params().verify) {
      verify(digest({static_cast<uint64_t>(kind), static_cast<uint64_t>(in.dtype),
                     static_cast<uint64_t>(op), static_cast<uint64_t>(root), in.count,
                     static_cast<uint64_t>(algorithm), static_cast<uint64_t>(backend), shape_tag}),
             deadline);
    }
    Backend b = resolve(backend, deadline);
    if (b == Backend::kNccl && !nccl_) nccl_ = std::make_unique<NcclComms>(*comm_, dev, deadline);
    if (b == Backend::kStaged && !stager_) {
      stager_ = std::make_unique<Stager>(dev, static_cast<size_t>(gpu_params().stage_bytes));
    }
    last_ = b;
    PTC_LOG(kDebug, name, " of ", in.count, " x ", dtype_name(in.dtype), " on cuda:", dev.ordinal(),
            " via ", backend_name(b));
    body(b, dev, deadline);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kInvalidArgument) throw;  // nothing moved yet
    // Anything else leaves ranks out of step: fail this communicator on
    // every rank (peers see the TCP connections close) and free the GPU.
    failure_ = str_cat(error_kind_name(e.kind()), " error in GPU ", name, ": ", e.what());
    PTC_LOG(kError, failure_);
    if (nccl_) nccl_->abort();
    comm_->close();
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
  run("allreduce", 1, in, op, 0, static_cast<int>(algorithm), backend, timeout_s, shape_tag,
      [&](Backend b, Device& dev, TimePoint deadline) {
        if (b == Backend::kStaged) {
          stager_->allreduce(*comm_, in.ptr, out.ptr, in.count, in.dtype, op, algorithm, deadline,
                             shape_tag);
          return;
        }
        // NCCL has no mean with pytfcomm's rounding: a sum, then one division.
        ReduceOp nop = op == ReduceOp::kMean ? ReduceOp::kSum : op;
        if (algorithm == Algorithm::kHierarchical) {
          nccl_->hierarchical_allreduce(in.ptr, out.ptr, in.count, in.dtype, nop, deadline);
        } else {
          // ring / recursive doubling / auto: NCCL picks its own algorithm.
          nccl_->allreduce(in.ptr, out.ptr, in.count, in.dtype, nop, deadline);
        }
        if (op == ReduceOp::kMean) dev.divide(out.ptr, out.count, out.dtype, comm_->size());
        if (in.dtype == DType::kBool) dev.bool_normalize(out.ptr, out.count);
        nccl_->wait(deadline, "NCCL allreduce");
      });
}

void GpuCommunicator::broadcast(const DeviceBuffer& in, const DeviceBuffer& out, int root,
                                Backend backend, double timeout_s, uint32_t shape_tag) {
  PTC_CHECK_ARG(root >= 0 && root < comm_->size(), "root must be a rank in [0, ", comm_->size(),
                "), got ", root);
  run("broadcast", 2, in, ReduceOp::kSum, root, 0, backend, timeout_s, shape_tag,
      [&](Backend b, Device& dev, TimePoint deadline) {
        if (comm_->rank() == root && in.ptr != out.ptr) {
          PTC_CU_CHECK(driver().cuMemcpyDtoDAsync_v2(
              out.ptr, in.ptr, in.count * dtype_size(in.dtype), dev.stream()));
        }
        if (b == Backend::kStaged) {
          stager_->broadcast(*comm_, out.ptr, out.count, out.dtype, root, deadline, shape_tag);
          return;
        }
        nccl_->broadcast(out.ptr, out.count, out.dtype, root, deadline);
        nccl_->wait(deadline, "NCCL broadcast");
      });
}

void GpuCommunicator::allgather(const DeviceBuffer& in, const DeviceBuffer& out, Backend backend,
                                double timeout_s, uint32_t shape_tag) {
  run("allgather", 3, in, ReduceOp::kSum, 0, 0, backend, timeout_s, shape_tag,
      [&](Backend b, Device&, TimePoint deadline) {
        if (b == Backend::kStaged) {
          stager_->allgather(*comm_, in.ptr, out.ptr, in.count, in.dtype, deadline, shape_tag);
          return;
        }
        nccl_->allgather(in.ptr, out.ptr, in.count, in.dtype, deadline);
        nccl_->wait(deadline, "NCCL allgather");
      });
}

void GpuCommunicator::reduce_scatter(const DeviceBuffer& in, const DeviceBuffer& out, ReduceOp op,
                                     Backend backend, double timeout_s, uint32_t shape_tag) {
  PTC_CHECK_ARG(in.dtype != DType::kBool || op != ReduceOp::kMean,
                "op 'mean' is not defined for bool");
  PTC_CHECK_ARG(in.count % static_cast<size_t>(comm_->size()) == 0,
                "reduce_scatter needs a length divisible by the number of ranks (", comm_->size(),
                "), got ", in.count, " elements");
  run("reduce_scatter", 4, in, op, 0, 0, backend, timeout_s, shape_tag,
      [&](Backend b, Device& dev, TimePoint deadline) {
        if (b == Backend::kStaged) {
          stager_->reduce_scatter(*comm_, in.ptr, out.ptr, in.count, in.dtype, op, deadline,
                                  shape_tag);
          return;
        }
        ReduceOp nop = op == ReduceOp::kMean ? ReduceOp::kSum : op;
        nccl_->reduce_scatter(in.ptr, out.ptr, out.count, in.dtype, nop, deadline);
        if (op == ReduceOp::kMean) dev.divide(out.ptr, out.count, out.dtype, comm_->size());
        if (in.dtype == DType::kBool) dev.bool_normalize(out.ptr, out.count);
        nccl_->wait(deadline, "NCCL reduce_scatter");
      });
}

}  // namespace pytfcomm::gpu
