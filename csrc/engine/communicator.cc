#include "engine/communicator.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "algorithms/algorithms.h"
#include "common/error.h"
#include "common/logging.h"
#include "common/param.h"
#include "engine/external.h"
#include "engine/fusion.h"
#include "engine/thread_stream.h"
#include "observe/stall_inspector.h"
#include "observe/timeline.h"
#include "transport/connect.h"

namespace pytfcomm {

using algorithms::CollectiveKind;

namespace {

// Room for a record's table (header, entries, withdrawals) on top of the
// inputs it may carry (engine/round_record.h).
constexpr size_t kRecordTableBytes = 32 << 10;
// Below this the one-shot areas are too small to carry rounds.
constexpr size_t kMinAreaBytes = 16 << 10;

bool overlap(const void* a, size_t an, const void* b, size_t bn) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return an > 0 && bn > 0 && x < y + bn && y < x + an;
}

// Checks the options, connects the ranks (into `transport`) and returns what
// they agreed on.
EngineConfig connect(const CommOptions& o, std::unique_ptr<transport::Transport>* transport) {
  PTC_CHECK_ARG(o.size >= 1, "size must be >= 1, got ", o.size);
  PTC_CHECK_ARG(o.rank >= 0 && o.rank < o.size, "rank must be in [0, size=", o.size, "), got ",
                o.rank);
  PTC_CHECK_ARG(o.root_port >= 0 && o.root_port <= 65535, "port out of range: ", o.root_port);
  PTC_CHECK_ARG(o.size == 1 || o.rank == 0 || o.root_port != 0,
                "ranks other than 0 need rank 0's real port (got port 0)");
  reload_params();  // the environment as it is now, not at the first init()
  const Params& p = params();
  EngineConfig cfg;
  cfg.rank = o.rank;
  cfg.size = o.size;
  cfg.fork_generation = g_fork_generation.load();
  cfg.timeout_s = o.timeout_s > 0 ? o.timeout_s : p.timeout_s;
  cfg.drive_s = static_cast<double>(p.async_drive_us) * 1e-6;
  set_log_rank(o.rank);
  for (int r = 0; r < cfg.size; ++r) cfg.world.ranks.push_back(r);
  cfg.world.me = cfg.rank;
  transport::ConnectOptions c;
  c.job.rank = o.rank;
  c.job.size = o.size;
  c.job.root_host = o.root_host;
  c.job.root_port = static_cast<uint16_t>(o.root_port);
  c.job.bind_host = o.bind_host;
  c.job.host_id = o.host_id;
  c.job.connect_timeout_s = o.connect_timeout_s > 0 ? o.connect_timeout_s : p.connect_timeout_s;
  c.job.secret = o.secret;
  c.mode = o.transport.empty() ? p.transport : o.transport;
  // Records carry inputs of up to PYTFCOMM_ONESHOT_BYTES; as frames, less
  // above 3 ranks: an in-round all-reduce brings every rank every input
  // (size - 1 of them, against log2(size) for recursive doubling after the
  // round). Measured over TCP with ranks outnumbering cores (2026-11-27),
  // 64 KiB took 0.4-0.8x as long with recursive doubling at 4 and 8 ranks,
  // and 32 KiB at 8; smaller sizes were even within the noise.
  cfg.eager_bytes = static_cast<size_t>(p.oneshot_bytes);
  size_t frame_eager =
      cfg.size <= 3 ? cfg.eager_bytes : cfg.eager_bytes * 2 / static_cast<size_t>(cfg.size - 1);
  frame_eager &= ~size_t{63};  // records are whole cache lines
  c.rounds.table_bytes = kRecordTableBytes;
  c.rounds.area_inputs = cfg.eager_bytes;
  c.rounds.frame_inputs = frame_eager;
  c.rounds.min_area_bytes = kMinAreaBytes;
  // The setup agreement: a MIN over the ranks, with the collective's
  // metadata outside the collectives' numbering.
  algorithms::Workspace workspace;
  auto agree = [&](transport::Transport& t, int64_t* v, size_t n) {
    transport::MessageMeta meta;
    meta.seq = UINT32_MAX;
    meta.kind = static_cast<uint8_t>(CollectiveKind::kAllreduce);
    meta.dtype = static_cast<uint8_t>(DType::kInt64);
    meta.op = static_cast<uint8_t>(ReduceOp::kMin);
    meta.count = n;
    algorithms::Context ctx{t, meta, workspace, static_cast<size_t>(p.segment_bytes), nullptr};
    algorithms::recursive_doubling_allreduce(ctx, cfg.world, algorithms::Phase::kRecursiveDoubling,
                                             v, v, n, DType::kInt64, ReduceOp::kMin, 1);
  };
  transport::Connection conn = transport::connect(c, agree);
  cfg.root_port = conn.root_port;
  const transport::Topology& topo = conn.topology;
  cfg.hosts = topo.hosts;
  cfg.num_hosts = topo.num_hosts;
  cfg.local.ranks = topo.local_ranks;
  cfg.local.me = topo.local_index;
  cfg.uniform_hosts = topo.uniform_hosts;
  cfg.cross.ranks = topo.cross_ranks;
  cfg.cross.me = topo.cross_index;
  cfg.beat_s = conn.beat_s;
  cfg.segment_bytes = conn.segment_bytes;
  cfg.oversub_segment_bytes = conn.oversub_segment_bytes;
  cfg.halving_bytes = conn.halving_bytes;
  cfg.all_shared_memory = conn.all_shared_memory;
  cfg.shm_halving_from = conn.shm_halving_from;
  cfg.ahead_bytes = conn.ahead_bytes;
  *transport = std::move(conn.transport);
  if (cfg.size > 1) {
    const size_t capacity = (*transport)->round_capacity();
    cfg.eager_bytes = std::min(
        cfg.eager_bytes, capacity > kRecordTableBytes ? capacity - kRecordTableBytes : size_t{0});
  }
  PTC_LOG(kInfo, "connected: rank ", cfg.rank, " of ", cfg.size, ", local ", cfg.local.me, " of ",
          cfg.local.size(), ", ", cfg.num_hosts, " host(s), transport ", conn.mode, " (",
          conn.shm_peers, " peer(s) over shared memory), spin ", conn.spin_us, " us, by reference ",
          conn.shm_by_ref_bytes > 0 ? str_cat("from ", conn.shm_by_ref_bytes, " bytes per rank")
                                    : std::string("off"));
  return cfg;
}

double stall_warning_s(const CommOptions& o) {
  return o.stall_warning_s >= 0 ? o.stall_warning_s : params().stall_warning_s;
}

}  // namespace

Communicator::Communicator(const CommOptions& o)
    : cfg_(connect(o, &transport_)),
      inspector_(std::make_unique<StallInspector>(cfg_.rank, cfg_.size, stall_warning_s(o))),
      queue_(cfg_, transport_, timeline_),
      driver_(cfg_, queue_, transport_.get(), inspector_.get(), timeline_) {
  inspector_->attach(transport_.get());
  transport_->set_status_observer(inspector_.get());
  timeline_.set(Timeline::open(params().timeline, cfg_.rank, cfg_.size, host_of(cfg_.rank)));
  fusion_ = std::make_unique<Fusion>(*this);
  if (cfg_.size > 1) background_ = std::thread([this] { queue_.background_loop(driver_); });
}

Communicator::~Communicator() {
  if (cfg_.forked()) {
    // A forked child: everything here is the parent's (threads that do not
    // exist in this process, connections and shared memory the parent still
    // uses). Leave all of it alone; the process's exit releases the memory.
    transport_.release();
    fusion_.release();
    timeline_.release();
    inspector_.release();
    if (background_.joinable()) new std::thread(std::move(background_));
    return;
  }
  fusion_.reset();  // joins the async thread while the transport still exists
  close();          // stops the background thread too
  if (background_.joinable()) background_.join();
}

std::string Communicator::timeline_path() const { return timeline_ ? timeline_->path() : ""; }

void TimelineSlot::set(std::unique_ptr<Timeline> t) {
  owned_ = std::move(t);
  ptr_.store(owned_.get(), std::memory_order_release);
}

Timeline* TimelineSlot::release() {
  ptr_.store(nullptr, std::memory_order_release);
  return owned_.release();
}

std::string Communicator::start_timeline(const std::string& pattern) {
  PTC_CHECK_ARG(!pattern.empty(), "start_timeline needs a file path");
  std::lock_guard<std::mutex> lock(timeline_mu_);
  std::string why;
  bool ok;
  if (!timeline_) {
    std::unique_ptr<Timeline> t =
        Timeline::open(pattern, cfg_.rank, cfg_.size, host_of(cfg_.rank), &why);
    ok = t != nullptr;
    if (ok) timeline_.set(std::move(t));
  } else {
    ok = timeline_->start(pattern, &why);
  }
  if (!ok) {
    PTC_THROW(kConfig, "cannot write the timeline file ", Timeline::path_for(pattern, cfg_.rank),
              ": ", why, " (pass a path in a writable directory of your own)");
  }
  return timeline_->path();
}

void Communicator::stop_timeline() {
  std::lock_guard<std::mutex> lock(timeline_mu_);
  if (timeline_) timeline_->stop();
}

std::string Communicator::host_of(int rank) const {
  return rank >= 0 && rank < cfg_.size ? cfg_.hosts[static_cast<size_t>(rank)] : "?";
}

bool Communicator::closed() const {
  if (cfg_.forked()) return true;  // the parent's
  return queue_.closed();
}

std::string Communicator::failure() const { return queue_.failure(); }

void Communicator::close() {
  // In a forked child it is the parent's: nothing to release here.
  if (cfg_.forked()) return;
  // Wait for a driving thread to leave the transport, then fail what is
  // left and release the transport: sockets, epoll, shared memory.
  if (!queue_.begin_close()) return;
  std::exception_ptr err;
  try {
    PTC_THROW(kClosed, "this communicator was closed while the collective waited");
  } catch (...) {
    err = std::current_exception();
  }
  driver_.abandon(err);
  for (Request* r : queue_.take_queued()) driver_.finish(r, err);
  if (inspector_) inspector_->attach(nullptr);
  // A record this rank published last may still be queued (its round was
  // complete without waiting on it): the peers need it to finish theirs.
  // Then every byte written must reach the peers' kernels before the sockets
  // close (a close can reset a connection and drop its tail): a few ms
  // normally, at most 10 s, and 2 s once a peer stops taking bytes in.
  if (transport_ && queue_.failure().empty()) transport_->flush(deadline_after(10.0));
  transport_.reset();  // closes every socket; peers see a clean EOF
  if (timeline_) timeline_->flush();
  queue_.end_close();
  if (background_.joinable() && background_.get_id() != std::this_thread::get_id()) {
    background_.join();
  }
}

size_t Communicator::stream_states() const { return queue_.stream_states(); }

bool Communicator::interrupt_unattended() { return queue_.interrupt_unattended(); }

Algorithm Communicator::choose_allreduce(size_t bytes) const {
  return driver_.executor().choose_allreduce(bytes);
}

size_t Communicator::allreduce_segment(Algorithm a, size_t bytes) const {
  return driver_.executor().allreduce_segment(a, bytes);
}

std::unique_ptr<Request> Communicator::make_request(CollectiveKind kind, const void* in, void* out,
                                                    size_t count, DType dtype, ReduceOp op,
                                                    Algorithm algorithm, int root, double timeout_s,
                                                    uint32_t shape_tag) {
  auto r = std::make_unique<Request>();
  r->desc.kind = kind;
  r->desc.dtype = dtype;
  r->desc.op = op;
  r->desc.algorithm = static_cast<uint8_t>(algorithm);
  r->desc.root = root;
  r->desc.shape_tag = shape_tag;
  r->desc.count = count;
  r->in = in;
  r->out = out;
  r->timeout_s = timeout_s > 0 ? timeout_s : cfg_.timeout_s;
  return r;
}

void Communicator::submit_async(std::vector<std::unique_ptr<Request>> reqs, uint64_t stream,
                                const std::string& label, bool may_drive) {
  queue_.check_process();
  // Driving here needs to know when these requests are done, after which
  // the engine has deleted them: their on_done counts down. Never another
  // backend's data (external requests) on this thread.
  std::shared_ptr<std::atomic<int>> left;
  if (may_drive && cfg_.drive_s > 0 && cfg_.size > 1 && !reqs.empty() &&
      std::none_of(reqs.begin(), reqs.end(), [](const auto& r) { return r->external; })) {
    left = std::make_shared<std::atomic<int>>(static_cast<int>(reqs.size()));
    for (auto& req : reqs) {
      req->on_done = [inner = std::move(req->on_done), left](std::exception_ptr e) {
        if (inner) inner(e);
        left->fetch_sub(1, std::memory_order_release);
      };
    }
  }
  if (!queue_.enqueue_async(reqs, stream, label, left != nullptr)) {
    queue_.wake_driver();  // the background thread drives when nobody else does
    return;
  }
  // Nobody drives: this thread does, for its own requests and whatever else
  // the rounds decide, until they are done or drive_s has passed; then the
  // background thread goes on (release_driver wakes it).
  const TimePoint until = deadline_after(cfg_.drive_s);
  driver_.drive_until(until, [&] {
    return left->load(std::memory_order_acquire) == 0 || queue_.sync_waiters() > 0 ||
           Clock::now() >= until;
  });
  queue_.release_driver();
}

void Communicator::run_sync(CollectiveKind kind, const void* in, void* out, size_t count,
                            DType dtype, ReduceOp op, Algorithm algorithm, int root,
                            double timeout_s, uint32_t shape_tag, const CallKey* key) {
  Request r;
  r.desc.kind = kind;
  r.desc.dtype = dtype;
  r.desc.op = op;
  r.desc.algorithm = static_cast<uint8_t>(algorithm);
  r.desc.root = root;
  r.desc.shape_tag = shape_tag;
  r.desc.count = count;
  r.in = in;
  r.out = out;
  r.timeout_s = timeout_s > 0 ? timeout_s : cfg_.timeout_s;
  Request* one = &r;
  run_requests(&one, 1, key);
}

void Communicator::run_requests(Request* const* rs, size_t n, const CallKey* key) {
  // Before any lock: in a forked child a lock may be held forever by a
  // thread of the parent that does not exist here.
  queue_.check_process();
  if (cfg_.size == 1) {
    queue_.check_usable();
    // One rank: the result is the input (a mean of one value is that value).
    for (size_t i = 0; i < n; ++i) {
      const Request& r = *rs[i];
      if (r.external) {
        r.external->run(ExternalRun{deadline_after(r.timeout_s), nullptr, nullptr});
        continue;
      }
      const auto kind = r.desc.kind;
      if (count_per_rank(kind)) {
        r.recv_counts[0] = r.desc.count;
        void* out = nullptr;
        try {
          out = r.alloc_out(r.desc.count);
        } catch (...) {
          out = nullptr;
        }
        if (out && r.bytes()) std::memcpy(out, r.in, r.bytes());
        continue;
      }
      if (kind != CollectiveKind::kBarrier && kind != CollectiveKind::kBroadcast && r.out != r.in &&
          r.bytes()) {
        std::memcpy(r.out, r.in, r.bytes());
      }
    }
    return;
  }
  const bool named = key != nullptr && !key->name.empty();
  const ThreadStream& ts = thread_stream();
  const uint64_t stream = key != nullptr && key->stream != 0
                              ? key->stream
                              : (named ? stream_id("name", key->name) : ts.id);
  // This thread's stream while the call runs.
  StreamState* in_use = queue_.enqueue_calls(rs, n, stream, named ? &key->name : nullptr, ts.name);
  queue_.await(rs, n, in_use, driver_);
  for (size_t i = 0; i < n; ++i) {
    if (rs[i]->error()) std::rethrow_exception(rs[i]->error());
  }
}

void Communicator::allreduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                             Algorithm algorithm, double timeout_s, uint32_t shape_tag,
                             const CallKey* key) {
  PTC_CHECK_ARG(dtype != DType::kBool || op != ReduceOp::kMean,
                "op 'mean' is not defined for bool; use 'max' (any) or 'min' (all)");
  size_t bytes = count * dtype_size(dtype);
  PTC_CHECK_ARG(in == out || !overlap(in, bytes, out, bytes),
                "the input and out overlap without being the same array; pass out=x for in "
                "place, or an array of its own");
  if (algorithm == Algorithm::kHierarchical && !cfg_.uniform_hosts) {
    PTC_THROW(kInvalidArgument,
              "hierarchical all-reduce needs the same number of ranks on every "
              "host; this job has uneven hosts: use algorithm='ring' or 'auto'");
  }
  if (algorithm == Algorithm::kOneShot && cfg_.size > 1 && bytes > cfg_.eager_bytes) {
    PTC_THROW(kInvalidArgument, "the one-shot all-reduce takes at most ", cfg_.eager_bytes,
              " bytes in this job, got ", bytes,
              "; use algorithm='auto' (PYTFCOMM_ONESHOT_BYTES sets the limit)");
  }
  run_sync(CollectiveKind::kAllreduce, in, out, count, dtype, op, algorithm, 0, timeout_s,
           shape_tag, key);
}

void Communicator::broadcast(void* buf, size_t count, DType dtype, int root, double timeout_s,
                             uint32_t shape_tag, const CallKey* key) {
  PTC_CHECK_ARG(root >= 0 && root < cfg_.size, "root must be a rank in [0, ", cfg_.size, "), got ",
                root);
  run_sync(CollectiveKind::kBroadcast, buf, buf, count, dtype, ReduceOp::kSum, Algorithm::kAuto,
           root, timeout_s, shape_tag, key);
}

void Communicator::allgather(const void* in, void* out, size_t count, DType dtype, double timeout_s,
                             uint32_t shape_tag, const CallKey* key) {
  const size_t bytes = count * dtype_size(dtype);
  PTC_CHECK_ARG(!overlap(in, bytes, out, bytes * static_cast<size_t>(cfg_.size)),
                "allgather's input and output overlap; pass an output array of its own");
  run_sync(CollectiveKind::kAllgather, in, out, count, dtype, ReduceOp::kSum, Algorithm::kAuto, 0,
           timeout_s, shape_tag, key);
}

void Communicator::reduce_scatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                                  double timeout_s, uint32_t shape_tag, const CallKey* key) {
  PTC_CHECK_ARG(dtype != DType::kBool || op != ReduceOp::kMean,
                "op 'mean' is not defined for bool");
  PTC_CHECK_ARG(count % static_cast<size_t>(cfg_.size) == 0,
                "reduce_scatter needs a length "
                "divisible by the number of ranks (",
                cfg_.size, "), got ", count, " elements");
  const size_t bytes = count * dtype_size(dtype);
  PTC_CHECK_ARG(!overlap(in, bytes, out, bytes / static_cast<size_t>(cfg_.size)),
                "reduce_scatter's input and output overlap; pass an output array of its own");
  run_sync(CollectiveKind::kReduceScatter, in, out, count, dtype, op, Algorithm::kAuto, 0,
           timeout_s, shape_tag, key);
}

void Communicator::fill_variable(Request& r, CollectiveKind kind, const void* in, size_t count,
                                 DType dtype, const std::function<void*(uint64_t)>& alloc,
                                 uint64_t* recv_counts, double timeout_s,
                                 uint32_t shape_tag) const {
  r.desc.kind = kind;
  r.desc.dtype = dtype;
  r.desc.shape_tag = shape_tag;
  r.desc.count = count;
  r.in = in;
  r.alloc_out = alloc;
  r.recv_counts = recv_counts;
  r.timeout_s = timeout_s > 0 ? timeout_s : cfg_.timeout_s;
}

void Communicator::allgatherv(const void* in, size_t count, DType dtype,
                              const std::function<void*(uint64_t)>& alloc, uint64_t* counts,
                              double timeout_s, uint32_t shape_tag, const CallKey* key) {
  PTC_CHECK_ARG(alloc != nullptr && counts != nullptr, "allgatherv needs alloc and counts");
  Request r;
  fill_variable(r, CollectiveKind::kAllgatherv, in, count, dtype, alloc, counts, timeout_s,
                shape_tag);
  Request* one = &r;
  run_requests(&one, 1, key);
}

void Communicator::alltoallv(const void* in, const uint64_t* send_counts, DType dtype,
                             const std::function<void*(uint64_t)>& alloc, uint64_t* recv_counts,
                             double timeout_s, uint32_t shape_tag, const CallKey* key) {
  PTC_CHECK_ARG(alloc != nullptr && send_counts != nullptr && recv_counts != nullptr,
                "alltoallv needs send counts, alloc and receive counts");
  uint64_t count = 0;
  for (int i = 0; i < cfg_.size; ++i) {
    PTC_CHECK_ARG(send_counts[i] <= (uint64_t{1} << 60) - count,
                  "alltoallv's send counts add up to an impossible size");
    count += send_counts[i];
  }
  Request r;
  fill_variable(r, CollectiveKind::kAlltoallv, in, count, dtype, alloc, recv_counts, timeout_s,
                shape_tag);
  r.send_counts = send_counts;
  Request* one = &r;
  run_requests(&one, 1, key);
}

void Communicator::barrier(double timeout_s, const CallKey* key) {
  run_sync(CollectiveKind::kBarrier, nullptr, nullptr, 0, DType::kUInt8, ReduceOp::kSum,
           Algorithm::kAuto, 0, timeout_s, 0, key);
}

int Communicator::join(double timeout_s) {
  if (cfg_.size == 1) {
    queue_.check_process();
    queue_.check_usable();
    return 0;
  }
  int last = -1;
  Request r;
  r.desc.kind = CollectiveKind::kBarrier;
  r.desc.dtype = DType::kUInt8;
  r.timeout_s = timeout_s > 0 ? timeout_s : cfg_.timeout_s;
  r.last_joined = &last;
  const CallKey key{"join", kJoinStream};
  Request* one = &r;
  run_requests(&one, 1, &key);
  return last;
}

}  // namespace pytfcomm
