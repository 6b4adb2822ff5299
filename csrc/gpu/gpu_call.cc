#include "gpu/gpu_call.h"

namespace pytfcomm::gpu {

const char* op_label(StreamOp op) {
  switch (op) {
    case StreamOp::kAllReduce:
      return "GPU all-reduce";
    case StreamOp::kBroadcast:
      return "GPU broadcast";
    case StreamOp::kAllGather:
      return "GPU all-gather";
    case StreamOp::kReduceScatter:
      return "GPU reduce-scatter";
  }
  return "GPU collective";
}

CollectiveKind collective_kind(StreamOp op) {
  switch (op) {
    case StreamOp::kBroadcast:
      return CollectiveKind::kBroadcast;
    case StreamOp::kAllGather:
      return CollectiveKind::kAllgather;
    case StreamOp::kReduceScatter:
      return CollectiveKind::kReduceScatter;
    default:
      return CollectiveKind::kAllreduce;
  }
}

void finish(Member& m, std::exception_ptr e) {
  if (!m.done) return;
  StreamDone d = std::move(m.done);
  m.done = nullptr;
  d(e);
}

std::exception_ptr error_ptr(ErrorKind kind, const std::string& msg) {
  return std::make_exception_ptr(Error(kind, msg));
}

uint32_t call_digest(const Group& g) { return call_fields<uint32_t>(g).nonzero(); }

void check_members(const Group& g) {
  const auto& first = g.members[0].tensors;
  for (size_t i = 1; i < g.members.size(); ++i) {
    const auto& ts = g.members[i].tensors;
    bool same = ts.size() == first.size();
    for (size_t j = 0; same && j < ts.size(); ++j) {
      same = ts[j].count == first[j].count && ts[j].dtype == first[j].dtype;
    }
    PTC_CHECK_ARG(same, "the ", op_label(g.call.op), " on GPU ", g.members[i].device,
                  " (group member ", i, ") has other tensors than member 0 on GPU ",
                  g.members[0].device, "; every replica must pass the same shapes and dtypes");
  }
}

}  // namespace pytfcomm::gpu
