#include "engine/communicator.h"

#include <pthread.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <thread>

#include "algorithms/algorithms.h"
#include "common/error.h"
#include "common/logging.h"
#include "common/param.h"
#include "engine/external.h"
#include "engine/fusion.h"
#include "engine/thread_stream.h"
#include "engine/user_interrupt.h"
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

// Incremented in every child of fork(): a communicator made before the fork
// belongs to the parent (its connections, its shared memory, its threads).
std::atomic<uint64_t> g_fork_generation{0};
[[maybe_unused]] const int kAtForkRegistered = [] {
  pthread_atfork(nullptr, nullptr, [] { g_fork_generation.fetch_add(1); });
  return 0;
}();

void append_decimal(std::string& s, uint64_t v) {
  char buf[24];
  s.append(buf, std::to_chars(buf, buf + sizeof(buf), v).ptr);
}

bool overlap(const void* a, size_t an, const void* b, size_t bn) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return an > 0 && bn > 0 && x < y + bn && y < x + an;
}

}  // namespace

Communicator::Communicator(const CommOptions& o)
    : rank_(o.rank), size_(o.size), negotiator_(o.rank < 0 ? 0 : o.rank, o.size < 1 ? 1 : o.size) {
  PTC_CHECK_ARG(o.size >= 1, "size must be >= 1, got ", o.size);
  PTC_CHECK_ARG(o.rank >= 0 && o.rank < o.size, "rank must be in [0, size=", o.size, "), got ",
                o.rank);
  PTC_CHECK_ARG(o.root_port >= 0 && o.root_port <= 65535, "port out of range: ", o.root_port);
  PTC_CHECK_ARG(o.size == 1 || o.rank == 0 || o.root_port != 0,
                "ranks other than 0 need rank 0's real port (got port 0)");
  reload_params();  // the environment as it is now, not at the first init()
  const Params& p = params();
  fork_generation_ = g_fork_generation.load();
  timeout_s_ = o.timeout_s > 0 ? o.timeout_s : p.timeout_s;
  drive_s_ = static_cast<double>(p.async_drive_us) * 1e-6;
  set_log_rank(o.rank);
  for (int r = 0; r < size_; ++r) world_.ranks.push_back(r);
  world_.me = rank_;
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
  eager_bytes_ = static_cast<size_t>(p.oneshot_bytes);
  size_t frame_eager =
      size_ <= 3 ? eager_bytes_ : eager_bytes_ * 2 / static_cast<size_t>(size_ - 1);
  frame_eager &= ~size_t{63};  // records are whole cache lines
  c.rounds.table_bytes = kRecordTableBytes;
  c.rounds.area_inputs = eager_bytes_;
  c.rounds.frame_inputs = frame_eager;
  c.rounds.min_area_bytes = kMinAreaBytes;
  // The setup agreement: a MIN over the ranks, with the collective's
  // metadata outside the collectives' numbering.
  auto agree = [&](transport::Transport& t, int64_t* v, size_t n) {
    transport::MessageMeta meta;
    meta.seq = UINT32_MAX;
    meta.kind = static_cast<uint8_t>(CollectiveKind::kAllreduce);
    meta.dtype = static_cast<uint8_t>(DType::kInt64);
    meta.op = static_cast<uint8_t>(ReduceOp::kMin);
    meta.count = n;
    algorithms::Context ctx{t, meta, workspace_, static_cast<size_t>(p.segment_bytes), nullptr};
    algorithms::recursive_doubling_allreduce(ctx, world_, algorithms::Phase::kRecursiveDoubling, v,
                                             v, n, DType::kInt64, ReduceOp::kMin, 1);
  };
  transport::Connection conn = transport::connect(c, agree);
  root_port_ = conn.root_port;
  const transport::Topology& topo = conn.topology;
  hosts_ = topo.hosts;
  num_hosts_ = topo.num_hosts;
  local_.ranks = topo.local_ranks;
  local_.me = topo.local_index;
  uniform_hosts_ = topo.uniform_hosts;
  cross_.ranks = topo.cross_ranks;
  cross_.me = topo.cross_index;
  beat_s_ = conn.beat_s;
  segment_bytes_ = conn.segment_bytes;
  oversub_segment_bytes_ = conn.oversub_segment_bytes;
  halving_bytes_ = conn.halving_bytes;
  all_shared_memory_ = conn.all_shared_memory;
  transport_ = std::move(conn.transport);
  if (size_ > 1) {
    const size_t capacity = transport_->round_capacity();
    eager_bytes_ = std::min(
        eager_bytes_, capacity > kRecordTableBytes ? capacity - kRecordTableBytes : size_t{0});
    transport_->round_arm(round_);
  }
  double stall = o.stall_warning_s >= 0 ? o.stall_warning_s : p.stall_warning_s;
  inspector_ = std::make_unique<StallInspector>(rank_, size_, stall);
  inspector_->attach(transport_.get());
  transport_->set_status_observer(inspector_.get());
  timeline_.set(Timeline::open(p.timeline, rank_, size_, host_of(rank_)));
  PTC_LOG(kInfo, "connected: rank ", rank_, " of ", size_, ", local ", local_.me, " of ",
          local_.size(), ", ", num_hosts_, " host(s), transport ", conn.mode, " (", conn.shm_peers,
          " peer(s) over shared memory), spin ", conn.spin_us, " us");
  fusion_ = std::make_unique<Fusion>(*this);
  if (size_ > 1) background_ = std::thread([this] { background_loop(); });
}

Communicator::~Communicator() {
  if (g_fork_generation.load() != fork_generation_) {
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

void Communicator::TimelineSlot::set(std::unique_ptr<Timeline> t) {
  owned_ = std::move(t);
  ptr_.store(owned_.get(), std::memory_order_release);
}

Timeline* Communicator::TimelineSlot::release() {
  ptr_.store(nullptr, std::memory_order_release);
  return owned_.release();
}

std::string Communicator::start_timeline(const std::string& pattern) {
  PTC_CHECK_ARG(!pattern.empty(), "start_timeline needs a file path");
  std::lock_guard<std::mutex> lock(timeline_mu_);
  std::string why;
  bool ok;
  if (!timeline_) {
    std::unique_ptr<Timeline> t = Timeline::open(pattern, rank_, size_, host_of(rank_), &why);
    ok = t != nullptr;
    if (ok) timeline_.set(std::move(t));
  } else {
    ok = timeline_->start(pattern, &why);
  }
  if (!ok) {
    PTC_THROW(kConfig, "cannot write the timeline file ", Timeline::path_for(pattern, rank_), ": ",
              why, " (pass a path in a writable directory of your own)");
  }
  return timeline_->path();
}

void Communicator::stop_timeline() {
  std::lock_guard<std::mutex> lock(timeline_mu_);
  if (timeline_) timeline_->stop();
}

std::string Communicator::host_of(int rank) const {
  return rank >= 0 && rank < size_ ? hosts_[static_cast<size_t>(rank)] : "?";
}

bool Communicator::closed() const {
  if (g_fork_generation.load() != fork_generation_) return true;  // the parent's
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

std::string Communicator::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

void Communicator::close() {
  // In a forked child it is the parent's: nothing to release here.
  if (g_fork_generation.load() != fork_generation_) return;
  std::unique_lock<std::mutex> lock(mu_);
  if (closed_ && !transport_) return;
  closed_ = true;
  // Wait for a driving thread to leave the transport (it sees closing_ and
  // returns), then fail what is left and release the transport: sockets,
  // epoll, shared memory.
  closing_.store(true);
  if (transport_ && driving_) transport_->wake();
  ++waiters_;
  cv_.wait(lock, [this] { return !driving_; });
  --waiters_;
  driving_ = true;  // nobody drives a closed communicator again
  lock.unlock();
  std::exception_ptr err;
  try {
    PTC_THROW(kClosed, "this communicator was closed while the collective waited");
  } catch (...) {
    err = std::current_exception();
  }
  for (auto& kv : negotiator_.mine()) finish(kv.second, err);
  for (Request* r : fresh_) finish(r, err);
  fresh_.clear();
  lock.lock();
  std::vector<Request*> queued;
  queued.swap(submitted_);
  lock.unlock();
  for (Request* r : queued) finish(r, err);
  if (inspector_) inspector_->attach(nullptr);
  // A record this rank published last may still be queued (its round was
  // complete without waiting on it): the peers need it to finish theirs.
  // Then every byte written must reach the peers' kernels before the sockets
  // close (a close can reset a connection and drop its tail): a few ms
  // normally, at most 10 s, and 2 s once a peer stops taking bytes in.
  if (transport_ && failure_.empty()) transport_->flush(deadline_after(10.0));
  transport_.reset();  // closes every socket; peers see a clean EOF
  if (timeline_) timeline_->flush();
  lock.lock();
  stop_ = true;  // nothing left for the background thread: let it go now
  // Streams still in use by a waiting caller go when it leaves (await).
  for (auto it = streams_.begin(); it != streams_.end();) {
    it = it->second.active == 0 && it->second.unattended == 0 ? streams_.erase(it) : std::next(it);
  }
  cv_.notify_all();
  bg_cv_.notify_all();
  lock.unlock();
  if (background_.joinable() && background_.get_id() != std::this_thread::get_id()) {
    background_.join();
  }
}

size_t Communicator::stream_states() const {
  std::lock_guard<std::mutex> lock(mu_);
  return streams_.size();
}

void Communicator::check_process() const {
  if (g_fork_generation.load(std::memory_order_relaxed) != fork_generation_) {
    PTC_THROW(kClosed,
              "this communicator belongs to the process that created it, not to this forked "
              "child (its connections and shared memory are the parent's): call "
              "pytfcomm.init() in the child for a job of its own");
  }
}

void Communicator::check_usable_locked() const {
  check_process();
  if (!closed_) return;
  if (!failure_.empty()) {
    // The calls that were waiting got the root cause's class; later ones are
    // told the communicator is closed, and why.
    PTC_THROW(kClosed, "this communicator was closed after an earlier error: ", failure_,
              " -- create a new one with pytfcomm.init()");
  }
  PTC_THROW(kClosed, "this communicator is closed; create a new one with pytfcomm.init()");
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
  r->timeout_s = timeout_s > 0 ? timeout_s : timeout_s_;
  return r;
}

void Communicator::enqueue_locked(Request* r, uint64_t stream, bool owned, StreamState* st) {
  check_usable_locked();
  if (!st) st = &streams_[stream];
  r->key.stream = stream;
  r->key.seq = st->next++;
  r->submitted = Clock::now();
  r->deadline = deadline_after(r->timeout_s);
  if (timeline_) r->submit_ns = Timeline::now_ns();
  submitted_.push_back(r);
  has_submitted_.store(true, std::memory_order_release);
  if (owned) {  // only submit_async's (TF ops'): engine/user_interrupt.h
    async_pending_.fetch_add(1);
    note_unattended(1);
  }
}

void Communicator::submit_async(std::vector<std::unique_ptr<Request>> reqs, uint64_t stream,
                                const std::string& label, bool may_drive) {
  check_process();
  // Driving here needs to know when these requests are done, after which
  // the engine has deleted them: their on_done counts down. Never another
  // backend's data (external requests) on this thread.
  std::shared_ptr<std::atomic<int>> left;
  if (may_drive && drive_s_ > 0 && size_ > 1 && !reqs.empty() &&
      std::none_of(reqs.begin(), reqs.end(), [](const auto& r) { return r->external; })) {
    left = std::make_shared<std::atomic<int>>(static_cast<int>(reqs.size()));
    for (auto& req : reqs) {
      req->on_done = [inner = std::move(req->on_done), left](std::exception_ptr e) {
        if (inner) inner(e);
        left->fetch_sub(1, std::memory_order_release);
      };
    }
  }
  bool drive_here = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    check_usable_locked();
    StreamState& st = streams_[stream];
    if (st.unattended > 0) {
      // A TF op's executions run one after another (each finishes before
      // the next starts), every loop iteration in a stream of its own. One
      // still waiting here means two at once, e.g. one tf.function called
      // from two threads: which of them is the n-th would depend on timing.
      PTC_THROW(kInvalidArgument, "'", label,
                "' started while another execution of it still waits for its collectives (the "
                "same tf.function or graph run from two threads at once?); executions of an op "
                "are matched across workers by their count, so which would pair with which "
                "would depend on timing: give each thread its own tf.function");
    }
    st.unattended += static_cast<int>(reqs.size());
    for (auto& req : reqs) {
      Request* r = req.get();
      enqueue_locked(r, stream, true, &st);
      r->label = label;
      r->label.append(" #");
      append_decimal(r->label, r->key.seq);
      owned_submitted_.push_back(std::move(req));
    }
    if (left && !driving_ && sync_waiters_.load() == 0) drive_here = driving_ = true;
  }
  if (!drive_here) {
    bg_cv_.notify_one();  // the background thread drives when nobody else does
    if (transport_) transport_->wake();
    return;
  }
  // Nobody drives: this thread does, for its own requests and whatever else
  // the rounds decide, until they are done or drive_s has passed; then the
  // background thread goes on (release_driver_locked wakes it).
  inline_until_ = deadline_after(drive_s_);
  drive([&] {
    return left->load(std::memory_order_acquire) == 0 ||
           sync_waiters_.load(std::memory_order_relaxed) > 0 || Clock::now() >= inline_until_;
  });
  inline_until_ = TimePoint::max();
  std::lock_guard<std::mutex> lock(mu_);
  release_driver_locked();
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
  r.timeout_s = timeout_s > 0 ? timeout_s : timeout_s_;
  Request* one = &r;
  run_requests(&one, 1, key);
}

void Communicator::run_requests(Request* const* rs, size_t n, const CallKey* key) {
  // Before any lock: in a forked child a lock may be held forever by a
  // thread of the parent that does not exist here.
  check_process();
  if (size_ == 1) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      check_usable_locked();
    }
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
  StreamState* in_use = nullptr;  // this thread's stream while the call runs
  {
    std::lock_guard<std::mutex> lock(mu_);
    check_usable_locked();               // before a closed communicator keeps a stream
    StreamState& st = streams_[stream];  // node-based: stays put
    const std::thread::id me = std::this_thread::get_id();
    if (st.active > 0 && st.user != me) {
      // Two threads calling in one stream at once (two threads of one name,
      // or one name= from two threads) share one numbering: which of them is
      // the n-th call depends on timing, so their calls could pair with
      // either thread's calls on the other ranks. Horovod refuses a name
      // already in flight likewise.
      if (named) {
        PTC_THROW(kInvalidArgument, "two threads call collectives named '", key->name,
                  "' on this communicator at once; calls of one name are matched across ranks "
                  "by name and call count, so which thread's call pairs with which on the "
                  "other ranks would depend on timing: give each thread's calls their own name");
      }
      PTC_THROW(kInvalidArgument, "two threads named '", ts.name,
                "' call collectives on this communicator at once; collectives are matched "
                "across ranks by thread name and call count, so give each thread its own "
                "name (threading.Thread(name=...)), or pass name= to the calls");
    }
    for (size_t i = 0; i < n; ++i) {
      Request& r = *rs[i];
      enqueue_locked(&r, stream, false, &st);
      // "allreduce #12 of MainThread" (no ostringstream: this is per call).
      r.label.assign(algorithms::kind_name(r.desc.kind));
      if (named) r.label.append(" '").append(key->name).append("'");
      r.label.append(" #");
      append_decimal(r.label, r.key.seq);
      if (!named) r.label.append(" of ").append(ts.name);
    }
    st.user = me;
    ++st.active;
    in_use = &st;
  }
  await(rs, n, in_use);
  for (size_t i = 0; i < n; ++i) {
    if (rs[i]->error()) std::rethrow_exception(rs[i]->error());
  }
}

Algorithm Communicator::choose_allreduce(size_t bytes) const {
  if (size_ > 1 && bytes <= eager_bytes_) return Algorithm::kOneShot;
  return resolve_allreduce(Algorithm::kAuto, bytes);
}

Algorithm Communicator::resolve_allreduce(Algorithm asked, size_t bytes) const {
  if (asked == Algorithm::kOneShot) return Algorithm::kRecursiveDoubling;  // not in the round
  if (asked != Algorithm::kAuto) return asked;
  if (bytes <= static_cast<size_t>(params().small_bytes)) return Algorithm::kRecursiveDoubling;
  if (num_hosts_ > 1 && uniform_hosts_ && local_.size() > 1) return Algorithm::kHierarchical;
  // 4, 8, 16, ... ranks with some of them over TCP: 2 log2(n) pairwise
  // exchanges instead of 2(n-1) ring steps (at 2 ranks the two are the same
  // exchange; over shared memory alone it measured no faster: docs/benchmarks.md).
  const bool power_of_two = (size_ & (size_ - 1)) == 0;
  if (size_ >= 4 && power_of_two && !all_shared_memory_ && bytes <= halving_bytes_) {
    return Algorithm::kHalvingDoubling;
  }
  return Algorithm::kRing;
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
  if (algorithm == Algorithm::kHierarchical && !uniform_hosts_) {
    PTC_THROW(kInvalidArgument,
              "hierarchical all-reduce needs the same number of ranks on every "
              "host; this job has uneven hosts: use algorithm='ring' or 'auto'");
  }
  if (algorithm == Algorithm::kOneShot && size_ > 1 && bytes > eager_bytes_) {
    PTC_THROW(kInvalidArgument, "the one-shot all-reduce takes at most ", eager_bytes_,
              " bytes in this job, got ", bytes,
              "; use algorithm='auto' (PYTFCOMM_ONESHOT_BYTES sets the limit)");
  }
  run_sync(CollectiveKind::kAllreduce, in, out, count, dtype, op, algorithm, 0, timeout_s,
           shape_tag, key);
}

void Communicator::broadcast(void* buf, size_t count, DType dtype, int root, double timeout_s,
                             uint32_t shape_tag, const CallKey* key) {
  PTC_CHECK_ARG(root >= 0 && root < size_, "root must be a rank in [0, ", size_, "), got ", root);
  run_sync(CollectiveKind::kBroadcast, buf, buf, count, dtype, ReduceOp::kSum, Algorithm::kAuto,
           root, timeout_s, shape_tag, key);
}

void Communicator::allgather(const void* in, void* out, size_t count, DType dtype, double timeout_s,
                             uint32_t shape_tag, const CallKey* key) {
  const size_t bytes = count * dtype_size(dtype);
  PTC_CHECK_ARG(!overlap(in, bytes, out, bytes * static_cast<size_t>(size_)),
                "allgather's input and output overlap; pass an output array of its own");
  run_sync(CollectiveKind::kAllgather, in, out, count, dtype, ReduceOp::kSum, Algorithm::kAuto, 0,
           timeout_s, shape_tag, key);
}

void Communicator::reduce_scatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                                  double timeout_s, uint32_t shape_tag, const CallKey* key) {
  PTC_CHECK_ARG(dtype != DType::kBool || op != ReduceOp::kMean,
                "op 'mean' is not defined for bool");
  PTC_CHECK_ARG(count % static_cast<size_t>(size_) == 0,
                "reduce_scatter needs a length "
                "divisible by the number of ranks (",
                size_, "), got ", count, " elements");
  const size_t bytes = count * dtype_size(dtype);
  PTC_CHECK_ARG(!overlap(in, bytes, out, bytes / static_cast<size_t>(size_)),
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
  r.timeout_s = timeout_s > 0 ? timeout_s : timeout_s_;
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
  for (int i = 0; i < size_; ++i) {
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
  if (size_ == 1) {
    check_process();
    std::lock_guard<std::mutex> lock(mu_);
    check_usable_locked();
    return 0;
  }
  int last = -1;
  Request r;
  r.desc.kind = CollectiveKind::kBarrier;
  r.desc.dtype = DType::kUInt8;
  r.timeout_s = timeout_s > 0 ? timeout_s : timeout_s_;
  r.last_joined = &last;
  const CallKey key{"join", kJoinStream};
  Request* one = &r;
  run_requests(&one, 1, &key);
  return last;
}

}  // namespace pytfcomm
