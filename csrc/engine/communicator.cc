#include "engine/communicator.h"

#include <charconv>
#include <cstdlib>
#include <map>
#include <thread>

#include "algorithms/algorithms.h"
#include "common/error.h"
#include "common/logging.h"
#include "common/param.h"
#include "engine/fusion.h"
#include "engine/timeline.h"
#include "transport/shm/connect.h"
#include "transport/tcp/bootstrap.h"
#include "transport/tcp/extra_streams.h"
#include "transport/tcp/transport.h"

namespace pytfcomm {

using algorithms::CollectiveKind;

namespace {
void append_decimal(std::string& s, uint64_t v) {
  char buf[24];
  s.append(buf, std::to_chars(buf, buf + sizeof(buf), v).ptr);
}

// Default polling windows before a wait blocks (PYTFCOMM_SPIN_US overrides):
// long enough to cover a loopback round trip, short enough that an idle rank
// stops using its core at once.
constexpr int64_t kBusySpinUs = 50;
constexpr int64_t kShmSpinUs = 1000;
int64_t kYieldSpinUs = [] {
  const char* v = std::getenv("PYTFCOMM_YIELD_SPIN_US");
  return v ? std::atoll(v) : 200;
}();
}  // namespace

const char* algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::kAuto:
      return "auto";
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kHierarchical:
      return "hierarchical";
    case Algorithm::kRecursiveDoubling:
      return "recursive_doubling";
    case Algorithm::kOneShot:
      return "oneshot";
  }
  return "?";
}

Communicator::Communicator(const CommOptions& o) : rank_(o.rank), size_(o.size) {
  const Params& p = params();
  PTC_CHECK_ARG(o.size >= 1, "size must be >= 1, got ", o.size);
  PTC_CHECK_ARG(o.rank >= 0 && o.rank < o.size, "rank must be in [0, size=", o.size, "), got ",
                o.rank);
  PTC_CHECK_ARG(o.root_port >= 0 && o.root_port <= 65535, "port out of range: ", o.root_port);
  PTC_CHECK_ARG(o.size == 1 || o.rank == 0 || o.root_port != 0,
                "ranks other than 0 need rank 0's real port (got port 0)");
  timeout_s_ = o.timeout_s > 0 ? o.timeout_s : p.timeout_s;
  set_log_rank(o.rank);
  tcp::BootstrapOptions b;
  b.rank = o.rank;
  b.size = o.size;
  b.root_host = o.root_host;
  b.root_port = static_cast<uint16_t>(o.root_port);
  b.bind_host = o.bind_host;
  b.host_id = o.host_id;
  b.connect_timeout_s = o.connect_timeout_s > 0 ? o.connect_timeout_s : p.connect_timeout_s;
  b.secret = o.secret;
  tcp::BootstrapResult boot = tcp::bootstrap(b);
  root_port_ = boot.root_port;

  // Topology from host identities: local group = same host, cross group =
  // same local index on every host.
  std::map<std::string, std::vector<int>> by_host;
  std::vector<std::string> order;
  for (const auto& peer : boot.peers) {
    if (!by_host.count(peer.host_id)) order.push_back(peer.host_id);
    by_host[peer.host_id].push_back(peer.rank);
    hosts_.push_back(peer.host);
  }
  num_hosts_ = static_cast<int>(order.size());
  for (int r = 0; r < size_; ++r) world_.ranks.push_back(r);
  world_.me = rank_;
  const auto& mine = by_host[boot.peers[static_cast<size_t>(rank_)].host_id];
  local_.ranks = mine;
  for (size_t i = 0; i < mine.size(); ++i) {
    if (mine[i] == rank_) local_.me = static_cast<int>(i);
  }
  uniform_hosts_ = true;
  for (const auto& id : order) uniform_hosts_ &= by_host[id].size() == mine.size();
  if (uniform_hosts_) {
    for (size_t h = 0; h < order.size(); ++h) {
      cross_.ranks.push_back(by_host[order[h]][static_cast<size_t>(local_.me)]);
      if (order[h] == boot.peers[static_cast<size_t>(rank_)].host_id) {
        cross_.me = static_cast<int>(h);
      }
    }
  }
  // Poll briefly, then block. Polls yield the core in between: on a shared
  // or oversubscribed machine the peer we wait for may need this very core,
  // and sched_yield costs next to nothing when nobody else is runnable.
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  bool oversubscribed = static_cast<unsigned>(local_.size()) > cores;
  int64_t spin = p.spin_us >= 0 ? p.spin_us : (oversubscribed ? kYieldSpinUs : kBusySpinUs);
  bool yield_cpu = std::getenv("PYTFCOMM_NO_YIELD") == nullptr;
  // Shared memory for the ranks of this host (auto/shm), TCP for the rest.
  shm::Mode mode = shm::parse_mode(o.transport.empty() ? p.transport : o.transport);
  shm::LocalLinks links = shm::connect_local_peers(
      rank_, boot, mode, static_cast<size_t>(p.shm_ring_bytes),
      static_cast<size_t>(p.shm_by_ref_bytes), static_cast<size_t>(p.oneshot_bytes),
      deadline_after(b.connect_timeout_s));
  // Waking a sleeping rank (futex, then an IPI to an idle vCPU) costs tens of
  // microseconds, far more than a shared-memory hop: poll longer before that.
  if (p.spin_us < 0 && links.own) spin = std::max(spin, kShmSpinUs);
  // Shared memory needs no kernel help to move bytes. When every rank is on
  // this host and has a core, poll without yielding: a yield hands the core
  // to an unrelated process for a whole time slice. When ranks outnumber
  // cores, keep yielding so the peer we wait for can run.
  if (links.own && num_hosts_ == 1 && !oversubscribed && std::getenv("PYTFCOMM_YIELD") == nullptr) {
    yield_cpu = false;
  }
  // Pairs of ranks on different hosts may use several TCP connections.
  std::vector<bool> remote(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    remote[static_cast<size_t>(r)] = boot.peers[static_cast<size_t>(r)].host_id !=
                                     boot.peers[static_cast<size_t>(rank_)].host_id;
  }
  // auto: 4 (measured 1.5x over one at 16-64 MiB across veth), fewer in big
  // jobs, where every rank would hold 4 descriptors per remote rank.
  int streams = p.tcp_streams > 0 ? static_cast<int>(p.tcp_streams)
                : size_ <= 16     ? 4
                : size_ <= 64     ? 2
                                  : 1;
  tcp::connect_extra_streams(rank_, boot, remote, streams, b.secret,
                             deadline_after(b.connect_timeout_s));
  auto pt = std::make_unique<tcp::PairTransport>(rank_, std::move(boot), std::move(links), spin,
                                                 yield_cpu);
  int shm_peers = pt->shm_peers();
  if (num_hosts_ == 1 && size_ > 1) {
    // One-shot all-reduces need every rank to share memory with every other;
    // a rank that fell back to TCP for some peer must switch it off for all.
    int64_t cap = static_cast<int64_t>(pt->local_oneshot_capacity());
    transport::MessageMeta meta;
    meta.seq = UINT32_MAX;  // outside the collectives' numbering
    meta.kind = static_cast<uint8_t>(CollectiveKind::kAllreduce);
    meta.dtype = static_cast<uint8_t>(DType::kInt64);
    meta.op = static_cast<uint8_t>(ReduceOp::kMin);
    meta.count = 1;
    pt->set_context("setup (agreeing on the one-shot exchange)");
    pt->set_deadline(deadline_after(b.connect_timeout_s));
    algorithms::Context ctx{*pt, meta, workspace_, static_cast<size_t>(p.segment_bytes), nullptr};
    algorithms::recursive_doubling_allreduce(ctx, world_, algorithms::Phase::kRecursiveDoubling,
                                             &cap, &cap, 1, DType::kInt64, ReduceOp::kMin, 1);
    pt->set_oneshot_capacity(static_cast<size_t>(cap));
    oneshot_capacity_ = static_cast<size_t>(cap);
  }
  transport_ = std::move(pt);
  double stall = o.stall_warning_s >= 0 ? o.stall_warning_s : p.stall_warning_s;
  inspector_ = std::make_unique<StallInspector>(rank_, size_, stall);
  inspector_->attach(transport_.get());
  transport_->set_status_observer(inspector_.get());
  timeline_ = Timeline::open(p.timeline, rank_, size_, host_of(rank_));
  PTC_LOG(kInfo, "connected: rank ", rank_, " of ", size_, ", local ", local_.me, " of ",
          local_.size(), ", ", num_hosts_, " host(s), transport ", shm::mode_name(mode), " (",
          shm_peers, " peer(s) over shared memory), spin ", spin, " us");
  fusion_ = std::make_unique<Fusion>(*this);
}

Communicator::~Communicator() {
  fusion_.reset();  // joins the async thread while the transport still exists
  close();
}

std::string Communicator::timeline_path() const { return timeline_ ? timeline_->path() : ""; }

std::string Communicator::host_of(int rank) const {
  return rank >= 0 && rank < size_ ? hosts_[static_cast<size_t>(rank)] : "?";
}

bool Communicator::closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

void Communicator::close() {
  std::lock_guard<std::mutex> lock(mu_);
  // After an error closed_ is already set but the transport (its epoll fd,
  // shared memory) is still held: release it here too.
  closed_ = true;
  inspector_->attach(nullptr);
  transport_.reset();  // closes every socket; peers see a clean EOF
  if (timeline_) timeline_->flush();
}

void Communicator::check_open() const {
  if (!closed_) return;
  if (!failure_.empty()) {
    PTC_THROW(kClosed, "this communicator was closed after an earlier error: ", failure_,
              " -- create a new one with pytfcomm.init()");
  }
  PTC_THROW(kClosed, "this communicator is closed; create a new one with pytfcomm.init()");
}

template <typename Body>
void Communicator::run(CollectiveKind kind, const char* name, DType dtype, ReduceOp op, int root,
                       size_t count, double timeout_s, uint32_t shape_tag, Body body) {
  const int64_t submit_ns = timeline_ ? Timeline::now_ns() : 0;
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t locked_ns = timeline_ ? Timeline::now_ns() : 0;
  check_open();
  transport::MessageMeta meta;
  meta.seq = seq_++;
  meta.kind = static_cast<uint8_t>(kind);
  meta.dtype = static_cast<uint8_t>(dtype);
  meta.op = static_cast<uint8_t>(op);
  meta.root = root;
  meta.count = count;
  meta.shape_tag = shape_tag;
  // "allreduce #12 (float32 x 1024)", built in a reused buffer: an
  // ostringstream here cost about as much as a whole small all-reduce.
  std::string& context = context_;
  context.assign(name).append(" #");
  append_decimal(context, meta.seq);
  context.append(" (").append(dtype_name(dtype)).append(" x ");
  append_decimal(context, count);
  context.push_back(')');
  transport_->set_context(context);
  double timeout = timeout_s > 0 ? timeout_s : timeout_s_;
  transport_->set_deadline(deadline_after(timeout));
  size_t bytes = count * dtype_size(dtype);
  inspector_->begin(meta, name, bytes, timeout, Clock::now());
  if (timeline_) timeline_->begin_collective(meta, name, bytes, submit_ns, locked_ns);
  algorithms::Context ctx{timeline_ ? timeline_->traced(*transport_) : *transport_, meta,
                          workspace_, static_cast<size_t>(params().segment_bytes), timeline_.get()};
  auto finish = [&](bool failed) {
    inspector_->end();
    if (timeline_) timeline_->end_collective(failed);
  };
  try {
    body(ctx);
    finish(false);
  } catch (const Error& e) {
    finish(true);
    if (e.kind() == ErrorKind::kInvalidArgument) throw;  // raised before any message moved
    failure_ = str_cat(error_kind_name(e.kind()), " error in ", context, ": ", e.what());
    PTC_LOG(kError, failure_);
    transport_->abort(e.what(), e.kind());
    closed_ = true;
    throw;
  } catch (const std::exception& e) {
    finish(true);
    failure_ = str_cat("unexpected error in ", context, ": ", e.what());
    transport_->abort(failure_, ErrorKind::kInternal);
    closed_ = true;
    throw Error(ErrorKind::kInternal, failure_);
  }
}

Algorithm Communicator::choose_allreduce(size_t bytes) const {
  if (oneshot_capacity_ > 0 && bytes <= oneshot_capacity_) return Algorithm::kOneShot;
  if (bytes <= static_cast<size_t>(params().small_bytes)) return Algorithm::kRecursiveDoubling;
  if (num_hosts_ > 1 && uniform_hosts_ && local_.size() > 1) return Algorithm::kHierarchical;
  return Algorithm::kRing;
}

void Communicator::allreduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                             Algorithm algorithm, double timeout_s, uint32_t shape_tag) {
  PTC_CHECK_ARG(dtype != DType::kBool || op != ReduceOp::kMean,
                "op 'mean' is not defined for bool; use 'max' (any) or 'min' (all)");
  size_t bytes = count * dtype_size(dtype);
  Algorithm a = algorithm == Algorithm::kAuto ? choose_allreduce(bytes) : algorithm;
  if (a == Algorithm::kHierarchical && !uniform_hosts_) {
    PTC_THROW(kInvalidArgument,
              "hierarchical all-reduce needs the same number of ranks on every "
              "host; this job has uneven hosts: use algorithm='ring' or 'auto'");
  }
  if (a == Algorithm::kOneShot && (oneshot_capacity_ == 0 || bytes > oneshot_capacity_)) {
    PTC_THROW(kInvalidArgument, "the one-shot all-reduce takes at most ", oneshot_capacity_,
              " bytes in this job, got ", bytes,
              oneshot_capacity_ == 0 ? " (it needs every rank on one host, sharing memory)" : "",
              "; use algorithm='auto' (PYTFCOMM_ONESHOT_BYTES sets the limit)");
  }
  last_algorithm_ = a;
  PTC_LOG(kDebug, "allreduce of ", bytes, " bytes: ", algorithm_name(a),
          algorithm == Algorithm::kAuto ? " (picked by auto)" : " (asked for)");
  run(CollectiveKind::kAllreduce, "allreduce", dtype, op, 0, count, timeout_s, shape_tag,
      [&](const algorithms::Context& c) {
        if (timeline_) timeline_->note_algorithm(algorithm_name(a), algorithm_name(algorithm));
        switch (a) {
          case Algorithm::kOneShot:
            algorithms::oneshot_allreduce(c, world_, in, out, count, dtype, op, size_);
            break;
          case Algorithm::kRecursiveDoubling:
            algorithms::recursive_doubling_allreduce(
                c, world_, algorithms::Phase::kRecursiveDoubling, in, out, count, dtype, op, size_);
            break;
          case Algorithm::kHierarchical:
            algorithms::hierarchical_allreduce(c, local_, cross_, in, out, count, dtype, op, size_,
                                               static_cast<size_t>(params().small_bytes));
            break;
          default:
            algorithms::ring_allreduce(c, world_, algorithms::Phase::kRing, in, out, count, dtype,
                                       op, size_);
        }
      });
}

void Communicator::broadcast(void* buf, size_t count, DType dtype, int root, double timeout_s,
                             uint32_t shape_tag) {
  PTC_CHECK_ARG(root >= 0 && root < size_, "root must be a rank in [0, ", size_, "), got ", root);
  run(CollectiveKind::kBroadcast, "broadcast", dtype, ReduceOp::kSum, root, count, timeout_s,
      shape_tag, [&](const algorithms::Context& c) {
        algorithms::broadcast(c, world_, buf, count, dtype, root);
      });
}

void Communicator::allgather(const void* in, void* out, size_t count, DType dtype, double timeout_s,
                             uint32_t shape_tag) {
  run(CollectiveKind::kAllgather, "allgather", dtype, ReduceOp::kSum, 0, count, timeout_s,
      shape_tag, [&](const algorithms::Context& c) {
        if (timeline_) timeline_->note_algorithm("ring", nullptr);
        algorithms::allgather(c, world_, in, out, count, dtype);
      });
}

void Communicator::reduce_scatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                                  double timeout_s, uint32_t shape_tag) {
  PTC_CHECK_ARG(dtype != DType::kBool || op != ReduceOp::kMean,
                "op 'mean' is not defined for bool");
  PTC_CHECK_ARG(count % static_cast<size_t>(size_) == 0,
                "reduce_scatter needs a length "
                "divisible by the number of ranks (",
                size_, "), got ", count, " elements");
  run(CollectiveKind::kReduceScatter, "reduce_scatter", dtype, op, 0, count, timeout_s, shape_tag,
      [&](const algorithms::Context& c) {
        if (timeline_) timeline_->note_algorithm("ring", nullptr);
        algorithms::reduce_scatter(c, world_, in, out, count, dtype, op, size_);
      });
}

void Communicator::barrier(double timeout_s) {
  run(CollectiveKind::kBarrier, "barrier", DType::kUInt8, ReduceOp::kSum, 0, 0, timeout_s, 0,
      [&](const algorithms::Context& c) { algorithms::barrier(c, world_); });
}

}  // namespace pytfcomm
