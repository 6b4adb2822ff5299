// Moving the data of one decided collective: within the round, from the
// inputs every rank's record carried (small collectives every rank asked for
// in the same round), with the algorithms over the transport, or by another
// backend (engine/external.h: the GPU backend's NCCL).
#include <algorithm>
#include <cstring>

#include "algorithms/algorithms.h"
#include "common/error.h"
#include "common/logging.h"
#include "common/param.h"
#include "common/reduce.h"
#include "engine/collective_executor.h"
#include "engine/engine_config.h"
#include "engine/external.h"
#include "engine/timeline_slot.h"
#include "observe/stall_inspector.h"
#include "observe/timeline.h"

namespace pytfcomm {

using algorithms::CollectiveKind;

transport::MessageMeta meta_of(const Request& r, uint32_t seq) {
  transport::MessageMeta m;
  m.seq = seq;
  m.kind = static_cast<uint8_t>(r.desc.kind);
  m.dtype = static_cast<uint8_t>(r.desc.dtype);
  m.op = static_cast<uint8_t>(r.desc.op);
  m.root = r.desc.root;
  m.count = r.desc.count;
  m.shape_tag = r.desc.shape_tag;
  return m;
}

namespace {

// Where a per-rank-count collective's `total` elements go: the caller's
// alloc_out, or scratch when it has none for them (this rank still takes
// part, so that the others finish; its caller knows why it gave none).
void* result_buffer(Request& r, uint64_t total, algorithms::Workspace& ws) {
  void* out = nullptr;
  try {
    if (r.alloc_out) out = r.alloc_out(total);
  } catch (...) {
    out = nullptr;
  }
  if (out == nullptr) out = ws.get(15, static_cast<size_t>(total) * dtype_size(r.desc.dtype));
  return out;
}

}  // namespace

CollectiveExecutor::CollectiveExecutor(const EngineConfig& cfg, transport::Transport* transport,
                                       StallInspector* inspector, const TimelineSlot& timeline,
                                       std::string& context)
    : cfg_(cfg),
      transport_(transport),
      inspector_(inspector),
      timeline_(timeline),
      context_(context) {}

void CollectiveExecutor::execute_eager(Request& r, const Decision& d) {
  const size_t count = static_cast<size_t>(r.desc.count);
  const size_t bytes = r.bytes();
  const DType dt = r.desc.dtype;
  switch (r.desc.kind) {
    case CollectiveKind::kAllreduce: {
      last_algorithm_ = Algorithm::kOneShot;
      if (count == 0) return;
      // ((x0 op x1) op x2) ... in rank order on every rank, from the
      // records (never from `out`, which may be this rank's input): every
      // rank computes the very same bits. A mean divides once, last.
      const ReduceOp op = r.desc.op;
      for (int i = 1; i < cfg_.size; ++i) {
        const void* a = i == 1 ? d.data[0] : r.out;
        const void* b = d.data[static_cast<size_t>(i)];
        if (op == ReduceOp::kMean && i == cfg_.size - 1) {
          reduce_divide(r.out, a, b, count, dt, cfg_.size);
        } else {
          reduce(r.out, a, b, count, dt, op);
        }
      }
      return;
    }
    case CollectiveKind::kBroadcast:
      if (cfg_.rank != r.desc.root && bytes) {
        std::memcpy(r.out, d.data[static_cast<size_t>(r.desc.root)], bytes);
      }
      return;
    case CollectiveKind::kAllgatherv: {
      // Counts came with the records; inputs too, each of its own size.
      char* out = static_cast<char*>(r.out);
      for (int i = 0; i < cfg_.size; ++i) {
        const size_t n = static_cast<size_t>(r.recv_counts[i]) * dtype_size(dt);
        if (n) std::memcpy(out, d.data[static_cast<size_t>(i)], n);
        out += n;
      }
      return;
    }
    case CollectiveKind::kAllgather:
      for (int i = 0; i < cfg_.size && bytes; ++i) {
        std::memcpy(static_cast<char*>(r.out) + static_cast<size_t>(i) * bytes,
                    d.data[static_cast<size_t>(i)], bytes);
      }
      return;
    default:
      return;  // a barrier: every rank has asked for it, which is all it takes
  }
}

void CollectiveExecutor::execute(Request& r, const Decision& d) {
  const uint32_t seq = exec_seq_++;
  transport::MessageMeta meta = meta_of(r, seq);
  if (r.desc.kind == CollectiveKind::kAllgatherv) {
    // Every rank's count came with the negotiation: no message of its own.
    uint64_t total = 0;
    for (int i = 0; i < cfg_.size; ++i) {
      r.recv_counts[i] = d.counts.empty() ? r.desc.count : d.counts[static_cast<size_t>(i)];
      total += r.recv_counts[i];
    }
    meta.count = total;  // the same on every rank, unlike each one's count
    r.out = result_buffer(r, total, workspace_);
  } else if (r.desc.kind == CollectiveKind::kAlltoallv) {
    meta.count = 0;  // counts are per rank and per pair; the messages' sizes say them
  }
  const char* name = algorithms::kind_name(r.desc.kind);
  const size_t bytes = r.bytes();
  const int64_t start_ns = timeline_ ? Timeline::now_ns() : 0;
  if (d.eager) {
    // Within the round: the inputs came with the records (a barrier needs
    // nothing more than every rank having asked for it).
    const bool barrier = r.desc.kind == CollectiveKind::kBarrier;
    if (timeline_) {
      timeline_->begin_collective(meta, name, bytes, r.submit_ns, start_ns, r.label);
      timeline_->note_algorithm(barrier ? "negotiation" : "oneshot",
                                algorithm_name(static_cast<Algorithm>(r.desc.algorithm)));
      timeline_->phase_begin(barrier ? "negotiation" : "oneshot", -1);
    }
    execute_eager(r, d);
    if (timeline_) timeline_->end_collective(false);
    if (r.desc.kind == CollectiveKind::kAllreduce) {
      PTC_LOG(kDebug, "allreduce of ", bytes, " bytes: oneshot",
              r.desc.algorithm == static_cast<uint8_t>(Algorithm::kAuto) ? " (picked by auto)"
                                                                         : " (asked for)");
    }
    return;
  }
  // "allreduce #12 (float32 x 1024)" plus the caller's label, for messages.
  context_.assign(name).append(" #").append(std::to_string(seq)).append(" (");
  context_.append(dtype_name(r.desc.dtype)).append(" x ").append(std::to_string(r.desc.count));
  context_.append(", '").append(r.label).append("')");
  inspector_->begin(meta, name, bytes, r.timeout_s, Clock::now());
  if (timeline_) timeline_->begin_collective(meta, name, bytes, r.submit_ns, start_ns, r.label);
  try {
    if (r.external) {
      // Another backend moves the data (engine/external.h); like the
      // transport's, its deadline starts now that every rank is here.
      if (timeline_) {
        timeline_->note_algorithm(r.external->algorithm(),
                                  algorithm_name(static_cast<Algorithm>(r.desc.algorithm)));
      }
      transport_->set_context(context_);
      r.external->run(ExternalRun{deadline_after(r.timeout_s), timeline_.get(),
                                  [this] { transport_->keep_alive(); }});
    } else {
      run_algorithm(r, meta, d.ahead);
    }
  } catch (...) {
    inspector_->end();
    if (timeline_) timeline_->end_collective(true);
    throw;
  }
  inspector_->end();
  if (timeline_) timeline_->end_collective(false);
}

Algorithm CollectiveExecutor::choose_allreduce(size_t bytes) const {
  if (cfg_.size > 1 && bytes <= cfg_.eager_bytes) return Algorithm::kOneShot;
  return resolve_allreduce(Algorithm::kAuto, bytes);
}

Algorithm CollectiveExecutor::resolve_allreduce(Algorithm asked, size_t bytes) const {
  if (asked == Algorithm::kOneShot) return Algorithm::kRecursiveDoubling;  // not in the round
  if (asked != Algorithm::kAuto) return asked;
  if (bytes <= static_cast<size_t>(params().small_bytes)) return Algorithm::kRecursiveDoubling;
  if (cfg_.num_hosts > 1 && cfg_.uniform_hosts && cfg_.local.size() > 1) {
    return Algorithm::kHierarchical;
  }
  // 4, 8, 16, ... ranks with some of them over TCP: 2 log2(n) pairwise
  // exchanges instead of 2(n-1) ring steps (at 2 ranks the two are the same
  // exchange). Over shared memory alone only where ranks outnumber cores and
  // the pieces are read from the sender's memory; with a core per rank, or
  // copied through the rings, it measured no faster (docs/transports.md).
  const bool power_of_two = (cfg_.size & (cfg_.size - 1)) == 0;
  const size_t per_rank = bytes / static_cast<size_t>(cfg_.size);
  const bool pairwise =
      !cfg_.all_shared_memory || (cfg_.shm_halving_from > 0 && per_rank >= cfg_.shm_halving_from);
  if (cfg_.size >= 4 && power_of_two && pairwise && bytes <= cfg_.halving_bytes) {
    return Algorithm::kHalvingDoubling;
  }
  return Algorithm::kRing;
}

size_t CollectiveExecutor::allreduce_segment(Algorithm a, size_t bytes) const {
  // Ranks outnumber cores somewhere and some pairs talk over TCP (and
  // PYTFCOMM_OVERSUB_SEGMENT_BYTES is not off): fewer, larger pieces mean
  // fewer receives racing the sending core for the socket's lock
  // (docs/benchmarks.md). Only where the algorithm's largest exchange still
  // holds two of them, so that reducing one overlaps moving the next: the
  // ring's is a rank's chunk, halving-doubling's the half its first step swaps.
  const bool ring = a == Algorithm::kRing;
  if (!ring && a != Algorithm::kHalvingDoubling) return cfg_.segment_bytes;
  if (cfg_.oversub_segment_bytes == 0 || cfg_.all_shared_memory) return cfg_.segment_bytes;
  const size_t largest = ring ? bytes / static_cast<size_t>(cfg_.size) : bytes / 2;
  return largest >= 2 * cfg_.oversub_segment_bytes ? cfg_.oversub_segment_bytes
                                                   : cfg_.segment_bytes;
}

void CollectiveExecutor::run_algorithm(Request& r, const transport::MessageMeta& meta,
                                       const algorithms::Ahead& ahead) {
  transport_->set_context(context_);
  // The data moves once every rank is here: its deadline starts now.
  transport_->set_deadline(deadline_after(r.timeout_s));
  const size_t count = static_cast<size_t>(r.desc.count);
  const size_t bytes = r.bytes();
  const bool reduce = r.desc.kind == CollectiveKind::kAllreduce;
  const auto asked = static_cast<Algorithm>(r.desc.algorithm);
  const Algorithm a = reduce ? resolve_allreduce(asked, bytes) : Algorithm::kAuto;
  algorithms::Context ctx{timeline_ ? timeline_->traced(*transport_) : *transport_,
                          meta,
                          workspace_,
                          allreduce_segment(a, bytes),
                          timeline_.get(),
                          ahead};
  if (ahead.came) ahead_taken_.fetch_add(1, std::memory_order_relaxed);
  const DType dt = r.desc.dtype;
  switch (r.desc.kind) {
    case CollectiveKind::kAllreduce: {
      last_algorithm_ = a;
      PTC_LOG(kDebug, "allreduce of ", bytes, " bytes: ", algorithm_name(a),
              asked == Algorithm::kAuto ? " (picked by auto)" : " (asked for)");
      if (timeline_) timeline_->note_algorithm(algorithm_name(a), algorithm_name(asked));
      switch (a) {
        case Algorithm::kRecursiveDoubling:
          algorithms::recursive_doubling_allreduce(ctx, cfg_.world,
                                                   algorithms::Phase::kRecursiveDoubling, r.in,
                                                   r.out, count, dt, r.desc.op, cfg_.size);
          break;
        case Algorithm::kHalvingDoubling:
          algorithms::halving_doubling_allreduce(ctx, cfg_.world,
                                                 algorithms::Phase::kHalvingDoubling, r.in, r.out,
                                                 count, dt, r.desc.op, cfg_.size);
          break;
        case Algorithm::kHierarchical:
          algorithms::hierarchical_allreduce(ctx, cfg_.local, cfg_.cross, r.in, r.out, count, dt,
                                             r.desc.op, cfg_.size,
                                             static_cast<size_t>(params().small_bytes));
          break;
        default:
          algorithms::ring_allreduce(ctx, cfg_.world, algorithms::Phase::kRing, r.in, r.out, count,
                                     dt, r.desc.op, cfg_.size);
      }
      break;
    }
    case CollectiveKind::kBroadcast:
      algorithms::broadcast(ctx, cfg_.world, r.out, count, dt, r.desc.root);
      break;
    case CollectiveKind::kAllgather:
      if (timeline_) timeline_->note_algorithm("ring", nullptr);
      algorithms::allgather(ctx, cfg_.world, r.in, r.out, count, dt);
      break;
    case CollectiveKind::kReduceScatter:
      if (timeline_) timeline_->note_algorithm("ring", nullptr);
      algorithms::reduce_scatter(ctx, cfg_.world, r.in, r.out, count, dt, r.desc.op, cfg_.size);
      break;
    case CollectiveKind::kAllgatherv: {
      const uint64_t* counts = r.recv_counts;
      bool equal = true;
      for (int i = 1; i < cfg_.size; ++i) equal &= counts[i] == counts[0];
      if (equal) {
        // Equal counts: the very all-gather of equal blocks, no cost for the v.
        if (timeline_) timeline_->note_algorithm("ring", nullptr);
        algorithms::allgather(ctx, cfg_.world, r.in, r.out, static_cast<size_t>(counts[0]), dt);
      } else {
        if (timeline_) timeline_->note_algorithm("ringv", nullptr);
        algorithms::allgatherv(ctx, cfg_.world, r.in, r.out, counts, dt);
      }
      break;
    }
    case CollectiveKind::kAlltoallv: {
      if (timeline_) timeline_->note_algorithm("pairwise", nullptr);
      algorithms::alltoallv_counts(ctx, cfg_.world, r.send_counts, r.recv_counts);
      uint64_t total = 0;
      for (int i = 0; i < cfg_.size; ++i) total += r.recv_counts[i];
      r.out = result_buffer(r, total, workspace_);
      algorithms::alltoallv(ctx, cfg_.world, r.in, r.send_counts, r.out, r.recv_counts, dt);
      break;
    }
    default:
      break;
  }
}

}  // namespace pytfcomm
