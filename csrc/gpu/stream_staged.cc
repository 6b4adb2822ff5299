#include "gpu/stream_staged.h"

#include "common/error.h"
#include "common/reduce.h"
#include "engine/communicator.h"
#include "gpu/completion.h"
#include "gpu/cuda_driver.h"
#include "gpu/device.h"
#include "gpu/staging.h"
#include "local/local_reduce.h"

namespace pytfcomm::gpu {
namespace {

constexpr size_t kAlign = 64;

}  // namespace

void run_staged(Group& g, const std::shared_ptr<Clique>& clique, TimePoint deadline) {
  const CudaDriver& d = driver();
  const StreamCall& call = g.call;
  PTC_CHECK_ARG(call.op != StreamOp::kReduceScatter,
                "the TF kernels' staged path has no reduce-scatter");
  Communicator* c = clique->comm();
  const int n = clique->group_size();
  const int p = clique->processes();
  const char* what = op_label(call.op);
  const auto& first = g.members[0].tensors;
  std::vector<size_t> off;
  size_t total = 0;
  for (const StreamTensor& t : first) {
    off.push_back(total);
    total += (t.count * dtype_size(t.dtype) + kAlign - 1) / kAlign * kAlign;
  }
  // Copy every member's inputs out (the gather's pieces back to back).
  std::vector<std::shared_ptr<char>> host(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    Member& m = g.members[static_cast<size_t>(i)];
    ScopedContext scope(m.ctx);
    host[static_cast<size_t>(i)] = pinned_block(total);
    const bool send = call.op != StreamOp::kBroadcast || clique->process_rank() == call.root;
    for (size_t j = 0; send && j < m.tensors.size(); ++j) {
      const StreamTensor& t = m.tensors[j];
      if (t.count == 0) continue;
      size_t at = call.op == StreamOp::kAllGather ? 0 : off[j];
      for (size_t k = 0; call.op == StreamOp::kAllGather && k < j; ++k) {
        at += m.tensors[k].count * dtype_size(t.dtype);
      }
      PTC_CU_CHECK(d.cuMemcpyDtoHAsync_v2(host[static_cast<size_t>(i)].get() + at, t.in,
                                          t.count * dtype_size(t.dtype), m.stream));
    }
    wait_member(m, nullptr, deadline, "staging copy-out");
  }
  std::shared_ptr<char> result;
  std::vector<std::pair<size_t, size_t>> back;  // (host offset, bytes) per output
  {
    ScopedContext scope(g.members[0].ctx);
    if (call.op == StreamOp::kAllReduce) {
      result = pinned_block(total);
      std::vector<ReduceSpan> spans;
      for (size_t j = 0; j < first.size(); ++j) {
        ReduceSpan s;
        for (auto& h : host) s.inputs.push_back(h.get() + off[j]);
        s.out = result.get() + off[j];
        s.count = first[j].count;
        s.dtype = first[j].dtype;
        spans.push_back(std::move(s));
      }
      const bool mean = call.reduce == ReduceOp::kMean;
      local_reduce(spans, mean && p > 1 ? ReduceOp::kSum : call.reduce, n);
      for (size_t j = 0; p > 1 && j < first.size(); ++j) {
        void* buf = result.get() + off[j];
        c->allreduce(buf, buf, first[j].count, first[j].dtype, mean ? ReduceOp::kSum : call.reduce,
                     call.algorithm, seconds_left(deadline));
        if (mean) divide(buf, buf, first[j].count, first[j].dtype, int64_t{n} * p);
      }
      for (size_t j = 0; j < first.size(); ++j) {
        back.emplace_back(off[j], first[j].count * dtype_size(first[j].dtype));
      }
    } else if (call.op == StreamOp::kBroadcast) {
      result = host[0];
      c->broadcast(result.get(), first[0].count, first[0].dtype, call.root, seconds_left(deadline));
      back.emplace_back(0, first[0].count * dtype_size(first[0].dtype));
    } else {
      size_t local = 0;
      for (const StreamTensor& t : first) local += t.count;
      const size_t esz = dtype_size(first[0].dtype);
      result = pinned_block(local * esz * static_cast<size_t>(p));
      c->allgather(host[0].get(), result.get(), local, first[0].dtype, seconds_left(deadline));
      back.emplace_back(0, local * esz * static_cast<size_t>(p));
    }
  }
  if (p > 1) count(CounterKind::kCrossWorkerOps);
  // Copy the result into every member's outputs; done once they landed.
  for (Member& m : g.members) {
    ScopedContext scope(m.ctx);
    for (size_t j = 0; j < back.size(); ++j) {
      if (back[j].second == 0) continue;
      PTC_CU_CHECK(d.cuMemcpyHtoDAsync_v2(m.tensors[j].out, result.get() + back[j].first,
                                          back[j].second, m.stream));
    }
    complete_after(m, clique, deadline, what, result);
  }
}

}  // namespace pytfcomm::gpu
