#include "gpu/clique.h"

#include <cstring>
#include <map>

#include "common/error.h"
#include "common/logging.h"
#include "gpu/check.h"
#include "gpu/nccl_lib.h"

namespace pytfcomm::gpu {
namespace {

// What each process tells the others before NCCL is set up.
struct Hello {
  uint8_t nccl;  // can (and may) use NCCL
  uint8_t pad[3];
  int32_t devices;     // GPUs in its group
  ReformFacts reform;  // the old communicator it kept, if any (gpu/nccl_reform.h)
};

// Half the time left: a shrink that fails leaves time to re-create.
TimePoint halfway(TimePoint deadline) {
  const TimePoint now = Clock::now();
  return deadline <= now || deadline == TimePoint::max() ? deadline : now + (deadline - now) / 2;
}

ncclUniqueId new_id() {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  PTC_NCCL_CHECK(nccl().ncclGetUniqueId(&id));
  return id;
}

}  // namespace

Clique::Clique(std::shared_ptr<Communicator> comm, const std::vector<int>& devices, bool may_shrink)
    : comm_(std::move(comm)), may_shrink_(may_shrink) {
  for (int d : devices) devices_.push_back(std::make_unique<Device>(d));
}

Clique::~Clique() {
  // NCCL first: its communicators use the devices' contexts.
  std::unique_ptr<NcclClique> world;
  {
    std::lock_guard<std::mutex> lock(mu_);
    world = std::move(world_);
    local_.reset();
    cross_.reset();
  }
  parent_.reset();
  if (world && world->shrink_ready()) {
    // Failed with its handles kept: parked, with its GPUs, for the next
    // communicator's shrink (gpu/nccl_reform.h).
    auto p = std::make_unique<Parked>();
    p->clique = std::move(world);
    p->devices = std::move(devices_);
    park(std::move(p));
  }
}

std::vector<CUcontext> Clique::contexts() const {
  std::vector<CUcontext> c;
  for (const auto& d : devices_) c.push_back(d->context());
  return c;
}

Backend Clique::backend(Backend requested, TimePoint deadline, uint32_t tag) {
  if (nccl_everywhere_ < 0) {
    const int n = group_size();
    const NcclStatus st = nccl_status();
    Hello mine{
        static_cast<uint8_t>(gpu_params().transport != Backend::kStaged && st.loaded), {}, n, {}};
    if (may_shrink_ && st.loaded && nccl().shrinks()) {
      parent_ = take_parked();
      const NcclClique* old = parent_ ? parent_->clique.get() : nullptr;
      if (old != nullptr && old->shrink_ready() && old->members() == n) {
        mine.reform.kept = 1;
        mine.reform.old_first_rank = old->first_rank();
        mine.reform.old_nranks = old->nranks();
        mine.reform.token = old->token();
      }
    }
    std::vector<Hello> all(1, mine);
    if (processes() > 1) {
      all.resize(static_cast<size_t>(processes()));
      comm_->allgather(&mine, all.data(), sizeof(Hello), DType::kUInt8, seconds_left(deadline),
                       tag);
    }
    for (const Hello& h : all) facts_.push_back(h.reform);
    std::string missing;
    for (size_t r = 0; r < all.size(); ++r) {
      if (all[r].devices != n) {
        PTC_THROW(kConfig, "process ", r, " runs this GPU collective on ", all[r].devices,
                  " local GPU(s) but process ", process_rank(), " on ", n,
                  "; every worker must use the same number of GPUs");
      }
      if (!all[r].nccl) missing += str_cat(missing.empty() ? "" : ", ", r);
    }
    nccl_everywhere_ = missing.empty() ? 1 : 0;
    if (!missing.empty()) {
      nccl_missing_ = str_cat("NCCL is missing on rank(s) ", missing,
                              st.loaded ? "" : str_cat(" (here: ", st.error, ")"));
      PTC_LOG(kInfo, "GPU collectives on ", n, " GPU(s) are staged through host memory: ",
              gpu_params().transport == Backend::kStaged ? "PYTFCOMM_GPU_TRANSPORT=staged"
                                                         : nccl_missing_);
    }
  }
  if (requested == Backend::kStaged) return Backend::kStaged;
  if (nccl_everywhere_ == 1) return Backend::kNccl;
  if (requested == Backend::kNccl) {
    PTC_THROW(kConfig, "transport 'nccl' was asked for but ", nccl_missing_,
              "; install nvidia-nccl-cu13 (or -cu12) everywhere, or use "
              "PYTFCOMM_GPU_TRANSPORT=staged");
  }
  return Backend::kStaged;
}

NcclClique& Clique::world(TimePoint deadline, uint32_t tag) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (world_) return *world_;
  }
  const int n = group_size();
  std::unique_ptr<NcclClique> c = shrink_world(deadline, tag);
  if (!c) {
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (process_rank() == 0) id = new_id();
    if (processes() > 1) {
      comm_->broadcast(&id, sizeof(id), DType::kUInt8, 0, seconds_left(deadline), tag);
    }
    c = std::make_unique<NcclClique>(id, processes() * n, process_rank() * n, contexts(), "world",
                                     deadline);
    PTC_LOG(kInfo, "NCCL ", nccl_version_string(nccl().version), " communicator: ", n, " GPU(s) x ",
            processes(), " process(es)");
  }
  if (may_shrink_ && nccl().shrinks()) c->keep_on_abort();
  std::lock_guard<std::mutex> lock(mu_);
  world_ = std::move(c);
  return *world_;
}

std::unique_ptr<NcclClique> Clique::shrink_world(TimePoint deadline, uint32_t tag) {
  std::unique_ptr<Parked> parent = std::move(parent_);  // released on every path
  const ShrinkPlan plan = plan_shrink(facts_, group_size());
  if (!plan.shrink) {
    if (parent) {
      PTC_LOG(kInfo, "the NCCL communicator is re-created from a fresh ncclUniqueId, not shrunk: ",
              plan.why_not);
    }
    return nullptr;
  }
  // Every process kept the same old communicator (plan_shrink), so all shrink it.
  std::unique_ptr<NcclClique> c;
  std::string why;
  try {
    c = std::make_unique<NcclClique>(*parent->clique, plan.excluded, contexts(), "world",
                                     halfway(deadline));
  } catch (const std::exception& e) {
    why = e.what();
  }
  // All use the shrunk communicator, or all re-create: agreed, never guessed.
  uint8_t ok = c ? 1 : 0;
  if (processes() > 1) {
    std::vector<uint8_t> oks(static_cast<size_t>(processes()));
    try {
      comm_->allgather(&ok, oks.data(), 1, DType::kUInt8, seconds_left(deadline), tag);
    } catch (const std::exception& e) {
      if (c) c->abort(str_cat("the shrink's agreement failed: ", e.what()));
      throw;
    }
    for (size_t r = 0; r < oks.size(); ++r) {
      if (oks[r] != 0) continue;
      if (ok != 0) why = str_cat("ncclCommShrink failed on process ", r);
      ok = 0;
    }
  }
  const int old_nranks = parent->clique->nranks();
  parent.reset();  // the old communicator: aborted (the shrink ended its work in flight)
  if (ok == 0) {
    if (c) c->abort(why);
    PTC_LOG(kWarn, "ncclCommShrink did not make the survivors' NCCL communicator (", why,
            "); re-creating it from a fresh ncclUniqueId");
    return nullptr;
  }
  std::string left;
  for (int r : plan.excluded) left += str_cat(left.empty() ? "" : ", ", r);
  PTC_LOG(kInfo, "NCCL ", nccl_version_string(nccl().version),
          " communicator shrunk (ncclCommShrink) from ", old_nranks, " to ", c->nranks(),
          " ranks, without old rank(s) ", left);
  return c;
}

Clique::Levels Clique::hierarchy(TimePoint deadline, uint32_t tag) {
  PTC_CHECK_ARG(group_size() == 1 && comm_,
                "the hierarchical GPU all-reduce needs one GPU per "
                "process and a communicator");
  PTC_CHECK_ARG(comm_->uniform_hosts(),
                "hierarchical all-reduce needs the same number of ranks on every host");
  const algorithms::Group& local = comm_->local_group();
  const algorithms::Group& cross = comm_->cross_group();
  std::unique_lock<std::mutex> lock(mu_);
  if (!local_) {
    lock.unlock();
    // Rank 0 of each group makes its id; one all-gather delivers all.
    struct Ids {
      ncclUniqueId local, cross;
    };
    Ids mine;
    std::memset(&mine, 0, sizeof(mine));
    if (local.me == 0) mine.local = new_id();
    if (cross.me == 0) mine.cross = new_id();
    std::vector<Ids> all(static_cast<size_t>(processes()));
    comm_->allgather(&mine, all.data(), sizeof(Ids), DType::kUInt8, seconds_left(deadline), tag);
    auto l =
        std::make_unique<NcclClique>(all[static_cast<size_t>(local.global(0))].local, local.size(),
                                     local.me, contexts(), "within the host", deadline);
    auto c =
        std::make_unique<NcclClique>(all[static_cast<size_t>(cross.global(0))].cross, cross.size(),
                                     cross.me, contexts(), "across hosts", deadline);
    lock.lock();
    local_ = std::move(l);
    cross_ = std::move(c);
  }
  return Levels{local_.get(), cross_.get(), local.me, local.size()};
}

std::vector<NcclClique*> Clique::nccl_cliques() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<NcclClique*> all;
  for (auto* c : {&world_, &local_, &cross_}) {
    if (*c) all.push_back(c->get());
  }
  return all;
}

void Clique::poll_errors(const char* what) {
  if (failed_.load()) PTC_THROW(kClosed, "the GPU collective was aborted: ", failure_);
  for (NcclClique* c : nccl_cliques()) c->check(what);
}

void Clique::check(const char* what) {
  try {
    poll_errors(what);
  } catch (const std::exception& e) {
    fail(e.what());
    throw;
  }
}

void Clique::abort_nccl(const std::string& why) noexcept {
  for (NcclClique* c : nccl_cliques()) c->abort(why);
}

void Clique::fail(const std::string& why) noexcept {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_.load()) return;
    failure_ = why;
    failed_.store(true);
  }
  abort_nccl(why);
  if (comm_) {
    PTC_LOG(kError, "GPU collective failed; closing the communicator: ", why);
    try {
      comm_->close();
    } catch (...) {
    }
  }
}

std::shared_ptr<Clique> find_clique(int64_t handle, const std::shared_ptr<Communicator>& comm,
                                    const std::vector<int>& devices) {
  static std::mutex mu;
  static auto* cliques = new std::map<std::pair<int64_t, std::vector<int>>,
                                      std::shared_ptr<Clique>>();  // never freed: see executors
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<Clique>& c = (*cliques)[{handle, devices}];
  if (!c) c = std::make_shared<Clique>(comm, devices);
  return c;
}

}  // namespace pytfcomm::gpu
