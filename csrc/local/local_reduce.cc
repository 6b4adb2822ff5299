#include "local/local_reduce.h"

#include <algorithm>
#include <exception>
#include <mutex>

#include "common/error.h"
#include "common/param.h"
#include "common/reduce.h"
#include "local/local_pool.h"

namespace pytfcomm {
namespace {

std::atomic<int64_t> g_counters[static_cast<int>(CounterKind::kCount)];

struct Chunk {
  const ReduceSpan* span;
  size_t begin;  // elements
  size_t end;
};

// out = op(inputs...) over [begin, end), in replica order; a sum reads every
// input side by side and writes the output chunk once (common/reduce.h), the
// last step divides for a mean.
void reduce_chunk(const Chunk& c, ReduceOp op, int64_t divisor, bool stream) {
  const ReduceSpan& s = *c.span;
  const size_t es = dtype_size(s.dtype);
  const size_t m = s.inputs.size();
  constexpr size_t kOnStack = 16;
  const void* stack[kOnStack];
  std::vector<const void*> heap;
  const void** srcs = stack;
  if (m > kOnStack) {
    heap.resize(m);
    srcs = heap.data();
  }
  for (size_t r = 0; r < m; ++r) srcs[r] = static_cast<const char*>(s.inputs[r]) + c.begin * es;
  reduce_many(static_cast<char*>(s.out) + c.begin * es, srcs, m, c.end - c.begin, s.dtype,
              op == ReduceOp::kMean ? ReduceOp::kSum : op, op == ReduceOp::kMean ? divisor : 0,
              stream);
}

}  // namespace

size_t local_chunk_bytes() {
  static const size_t bytes = static_cast<size_t>(read_param(ParamId::local_chunk_bytes).integer);
  return bytes;
}

void local_reduce(const std::vector<ReduceSpan>& spans, ReduceOp op, int64_t mean_divisor) {
  PTC_CHECK_ARG(valid_op(static_cast<uint8_t>(op)), "bad reduce op");
  PTC_CHECK_ARG(op != ReduceOp::kMean || mean_divisor > 0, "mean needs a positive divisor");
  std::vector<Chunk> chunks;
  int64_t bytes = 0;
  for (const ReduceSpan& s : spans) {
    PTC_CHECK_ARG(valid_dtype(static_cast<uint8_t>(s.dtype)), "bad dtype");
    PTC_CHECK_ARG(!s.inputs.empty(), "a span needs at least one input");
    const size_t es = dtype_size(s.dtype);
    // Keep chunk boundaries on 64-byte lines so no two chunks share a line.
    size_t per = std::max<size_t>(local_chunk_bytes() / es / 16 * 16, 16);
    for (size_t b = 0; b < s.count; b += per) chunks.push_back({&s, b, std::min(s.count, b + per)});
    bytes += static_cast<int64_t>(s.count * es);
  }
  // The reduction kernels do not throw for valid arguments (checked above);
  // keep the first exception anyway rather than letting one escape a pool thread.
  std::exception_ptr error;
  std::mutex mu;
  // Waking pool threads costs tens of microseconds: below this much data one
  // thread finishes first (a small model's whole gradient set, say).
  constexpr int64_t kInlineBytes = 256 << 10;
  if (bytes <= kInlineBytes) {
    for (const Chunk& c : chunks) reduce_chunk(c, op, mean_divisor, false);
    count(CounterKind::kReducedBytes, bytes);
    return;
  }
  // An output this large leaves the cache before anyone reads it (the inputs stream
  // through behind it): write it without first reading its lines (common/reduce.h).
  constexpr int64_t kStreamBytes = 16 << 20;
  const bool stream = bytes >= kStreamBytes;
  parallel_for(chunks.size(), [&](size_t i) {
    try {
      reduce_chunk(chunks[i], op, mean_divisor, stream);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!error) error = std::current_exception();
    }
  });
  if (error) std::rethrow_exception(error);
  count(CounterKind::kReducedBytes, bytes);
}

void count(CounterKind kind, int64_t delta) {
  g_counters[static_cast<int>(kind)].fetch_add(delta, std::memory_order_relaxed);
}

int64_t counter(CounterKind kind) {
  return g_counters[static_cast<int>(kind)].load(std::memory_order_relaxed);
}

}  // namespace pytfcomm
