// A pairwise all-reduce's first message sent right behind this rank's
// negotiation record (docs/negotiation.md, "The first step rides behind the
// record"): the rank publishes a record whose only announcement is the
// collective, flags it (kRecordSentAhead) and sends its first message to its
// first partner at once, so that it travels while the round completes. The
// round decides whether it is used, the same way on both ranks of the pair:
// when every rank asked for that collective alone (the one-entry fast path),
// the sender skips that message in the data phase and the partner takes it
// from the transport; any other round runs the collective as usual and the
// partner drops the message when the next round is armed.
#include <cstring>

#include "engine/collective_executor.h"
#include "engine/engine_config.h"
#include "engine/round_record.h"

namespace pytfcomm {

using algorithms::CollectiveKind;

algorithms::FirstSend CollectiveExecutor::first_send_of(const Request& r,
                                                        transport::MessageMeta* meta) const {
  if (r.desc.kind != CollectiveKind::kAllreduce || r.external || r.desc.count == 0) return {};
  const size_t bytes = r.bytes();
  const Algorithm a = resolve_allreduce(static_cast<Algorithm>(r.desc.algorithm), bytes);
  algorithms::Phase phase;
  if (a == Algorithm::kRecursiveDoubling) {
    phase = algorithms::Phase::kRecursiveDoubling;
  } else if (a == Algorithm::kHalvingDoubling) {
    phase = algorithms::Phase::kHalvingDoubling;
  } else {
    return {};
  }
  // The meta of the collective the next round decides first: in the fast
  // path nothing runs between this record and it.
  *meta = meta_of(r, exec_seq_);
  meta->phase = static_cast<uint8_t>(phase);
  return algorithms::first_send(phase, cfg_.world, static_cast<size_t>(r.desc.count));
}

bool CollectiveExecutor::can_send_ahead(const Request& r) {
  if (cfg_.ahead_bytes == 0) return false;
  transport::MessageMeta meta;
  const algorithms::FirstSend f = first_send_of(r, &meta);
  return f.peer >= 0 && transport_->ahead_room(f.peer, f.count * dtype_size(r.desc.dtype));
}

void CollectiveExecutor::send_ahead(const Request& r, uint64_t round) {
  transport::MessageMeta meta;
  const algorithms::FirstSend f = first_send_of(r, &meta);
  const size_t es = dtype_size(r.desc.dtype);
  transport_->send_ahead(f.peer, static_cast<const char*>(r.in) + f.begin * es, f.count * es, meta);
  ahead_round_ = round;
  ahead_key_ = r.key;
  ahead_sent_.fetch_add(1, std::memory_order_relaxed);
}

algorithms::Ahead CollectiveExecutor::ahead_in_round(const Request& r, uint64_t round) {
  algorithms::Ahead a;
  if (cfg_.ahead_bytes == 0) return a;  // agreed: no rank sends any
  transport::MessageMeta meta;
  const algorithms::FirstSend f = first_send_of(r, &meta);
  if (f.peer < 0) return a;
  a.sent = ahead_round_ == round && ahead_key_ == r.key;
  size_t n = 0;
  const char* rec = transport_->round_record(f.peer, &n);
  RecordHeader h;
  std::memcpy(&h, rec, sizeof(h));  // checked in full already (fast_round)
  a.came = (h.flags & kRecordSentAhead) != 0;
  return a;
}

}  // namespace pytfcomm
