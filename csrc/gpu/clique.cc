#include "gpu/clique.h"

#include <cstring>
#include <map>
#include <thread>

#include "common/logging.h"
#include "gpu/cuda_driver.h"
#include "gpu/gpu_params.h"
#include "gpu/nccl_lib.h"

namespace pytfcomm::gpu {
namespace {

// What each process tells the others before NCCL is set up.
struct Hello {
  uint8_t nccl;  // can (and may) use NCCL
  uint8_t pad[3];
  int32_t devices;  // GPUs in its group
};

}  // namespace

std::exception_ptr error_ptr(ErrorKind kind, const std::string& msg) {
  return std::make_exception_ptr(Error(kind, msg));
}

Clique::Clique(std::shared_ptr<Communicator> comm, const std::vector<int>& devices,
               TimePoint deadline)
    : comm_(std::move(comm)) {
  for (int d : devices) devices_.push_back(std::make_unique<Device>(d));
  const int n = group_size();
  const Backend wanted = gpu_params().transport;
  NcclStatus st = nccl_status();
  Hello mine{static_cast<uint8_t>(wanted != Backend::kStaged && st.loaded), {}, n};
  std::vector<Hello> all(1, mine);
  if (processes() > 1) {
    all.resize(static_cast<size_t>(processes()));
    comm_->allgather(&mine, all.data(), sizeof(Hello), DType::kUInt8, seconds_left(deadline));
  }
  std::string missing;
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].devices != n) {
      PTC_THROW(kConfig, "process ", r, " runs this GPU collective on ", all[r].devices,
                " local GPU(s) but process ", process_rank(), " on ", n,
                "; every worker must use the same number of GPUs");
    }
    if (!all[r].nccl) missing += str_cat(missing.empty() ? "" : ", ", r);
  }
  if (!missing.empty()) {
    if (wanted == Backend::kNccl) {
      PTC_THROW(kConfig, "PYTFCOMM_GPU_TRANSPORT=nccl but NCCL is missing on process(es) ", missing,
                st.loaded ? "" : str_cat(" (here: ", st.error, ")"),
                "; install nvidia-nccl-cu13 (or -cu12) everywhere or use staged");
    }
    PTC_LOG(kInfo, "TF GPU collectives on ", n, " GPU(s) are staged through host memory: ",
            wanted == Backend::kStaged ? "PYTFCOMM_GPU_TRANSPORT=staged"
                                       : str_cat("no NCCL on process(es) ", missing));
    return;
  }
  const NcclLib& lib = nccl();
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (process_rank() == 0) {
    ncclResult_t r = lib.ncclGetUniqueId(&id);
    if (r != ncclSuccess) raise(nullptr, r, "ncclGetUniqueId");
  }
  if (processes() > 1) {
    comm_->broadcast(&id, sizeof(id), DType::kUInt8, 0, seconds_left(deadline));
  }
  comms_.assign(static_cast<size_t>(n), nullptr);
  try {
    ncclResult_t first = ncclSuccess;
    std::exception_ptr err;
    {
      // One thread initialises several ranks: NCCL requires a group for
      // that, and the group must be closed whatever happens inside it.
      std::lock_guard<std::mutex> lock(mu_);
      lib.ncclGroupStart();
      try {
        for (int i = 0; i < n; ++i) {
          ScopedContext scope(devices_[static_cast<size_t>(i)]->context());
          ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
          config.blocking = 0;
          ncclResult_t r =
              lib.ncclCommInitRankConfig(&comms_[static_cast<size_t>(i)], processes() * n, id,
                                         process_rank() * n + i, &config);
          if (first == ncclSuccess && r != ncclInProgress) first = r;
        }
      } catch (...) {
        err = std::current_exception();
      }
      ncclResult_t r = lib.ncclGroupEnd();
      if (first == ncclSuccess && r != ncclInProgress) first = r;
    }
    if (err) std::rethrow_exception(err);
    if (first != ncclSuccess) raise(nullptr, first, "ncclCommInitRankConfig");
    for (size_t i = 0; i < comms_.size(); ++i) {
      settle(i, ncclInProgress, "ncclCommInitRankConfig", deadline);
    }
  } catch (const std::exception& e) {
    // The destructor does not run for a constructor that throws: release
    // NCCL here, and close the communicator (the peers are in this set-up).
    fail(str_cat("NCCL set-up failed: ", e.what()));
    throw;
  }
  PTC_LOG(kInfo, "NCCL ", nccl_version_string(lib.version), " clique for TF: ", n, " GPU(s) x ",
          processes(), " process(es)");
}

Clique::~Clique() {
  // Cliques live in a registry that is never destroyed; should one be,
  // release what is left.
  std::lock_guard<std::mutex> lock(mu_);
  abort_locked();
}

void Clique::abort_locked() noexcept {
  if (comms_.empty()) return;
  const NcclLib& lib = nccl();  // loaded, or comms_ would be empty
  for (ncclComm_t& c : comms_) {
    if (c != nullptr) lib.ncclCommAbort(c);
    c = nullptr;
  }
}

void Clique::fail(const std::string& why) noexcept {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_.load()) return;
    failure_ = why;
    failed_.store(true);
    abort_locked();
  }
  if (comm_) {
    PTC_LOG(kError, "GPU collective failed; closing the communicator: ", why);
    try {
      comm_->close();
    } catch (...) {
    }
  }
}

void Clique::raise(ncclComm_t comm, ncclResult_t r, const char* what) {
  const NcclLib& lib = nccl();
  std::string last;
  {
    std::lock_guard<std::mutex> lock(mu_);  // an aborted communicator is freed
    if (!failed_.load()) last = lib.ncclGetLastError(comm);
  }
  std::string msg = str_cat(what, " failed: ", lib.ncclGetErrorString(r),
                            last.empty() ? "" : str_cat(" (", last, ")"));
  fail(str_cat("NCCL: ", msg));
  throw_nccl_error(r, msg);
}

void Clique::settle(size_t i, ncclResult_t r, const char* what, TimePoint deadline) {
  const NcclLib& lib = nccl();
  auto start = Clock::now();
  while (r == ncclInProgress) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (failed_.load()) PTC_THROW(kClosed, "the NCCL clique was aborted: ", failure_);
      ncclResult_t q = lib.ncclCommGetAsyncError(comms_[i], &r);
      if (q != ncclSuccess) r = q;
    }
    if (r != ncclInProgress) break;
    if (Clock::now() >= deadline) {
      fail(str_cat("timed out in ", what));
      PTC_THROW(kTimeout, "timed out in ", what,
                " waiting for the other GPUs or processes (NCCL was aborted); a worker is "
                "missing, hung or slower than PYTFCOMM_TIMEOUT");
    }
    if (Clock::now() - start < std::chrono::microseconds(100)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  if (r != ncclSuccess) raise(comms_[i], r, what);
}

void Clique::launch(const char* what, const std::function<ncclResult_t(const ncclComm_t*)>& enqueue,
                    TimePoint deadline) {
  const NcclLib& lib = nccl();
  ncclResult_t r = ncclSuccess;
  std::exception_ptr err;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_.load()) PTC_THROW(kClosed, "the NCCL clique was aborted earlier: ", failure_);
    lib.ncclGroupStart();
    try {
      r = enqueue(comms_.data());
    } catch (...) {
      err = std::current_exception();  // the group must still be closed
    }
    ncclResult_t end = lib.ncclGroupEnd();
    if (r == ncclSuccess || r == ncclInProgress) r = end;
  }
  if (err) {
    fail(str_cat(what, ": a launch failed half-way"));
    std::rethrow_exception(err);
  }
  if (r != ncclSuccess && r != ncclInProgress) raise(comms_[0], r, what);
  for (size_t i = 0; i < comms_.size(); ++i) settle(i, r, what, deadline);
}

void Clique::check(const char* what) {
  if (failed_.load()) PTC_THROW(kClosed, "the GPU collective was aborted: ", failure_);
  if (comms_.empty()) return;
  const NcclLib& lib = nccl();
  ncclComm_t bad = nullptr;
  ncclResult_t state = ncclSuccess;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_.load()) PTC_THROW(kClosed, "the GPU collective was aborted: ", failure_);
    for (ncclComm_t c : comms_) {
      ncclResult_t s = ncclSuccess;
      lib.ncclCommGetAsyncError(c, &s);
      if (s != ncclSuccess && s != ncclInProgress) {
        bad = c;
        state = s;
        break;
      }
    }
  }
  // A peer that died or a broken connection shows up here.
  if (bad != nullptr) raise(bad, state, what);
}

std::shared_ptr<Clique> find_clique(int64_t handle, const std::shared_ptr<Communicator>& comm,
                                    const std::vector<int>& devices, TimePoint deadline) {
  static std::mutex mu;
  static auto* cliques = new std::map<std::pair<int64_t, std::vector<int>>,
                                      std::shared_ptr<Clique>>();  // never freed: see executors
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<Clique>& c = (*cliques)[{handle, devices}];
  if (!c) c = std::make_shared<Clique>(comm, devices, deadline);
  return c;
}

}  // namespace pytfcomm::gpu
