#include "local/local_reduce.h"

#include <algorithm>
#include <cstring>
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

// out = op(inputs...) over [begin, end): a chain of pairwise kernels that
// keeps the output chunk hot in cache; the last step divides for a mean.
void reduce_chunk(const Chunk& c, ReduceOp op, int64_t divisor) {
  const ReduceSpan& s = *c.span;
  const size_t es = dtype_size(s.dtype);
  const size_t n = c.end - c.begin;
  auto at = [&](const void* p) { return static_cast<const char*>(p) + c.begin * es; };
  char* out = static_cast<char*>(s.out) + c.begin * es;
  const size_t m = s.inputs.size();
  if (m == 1) {
    if (op == ReduceOp::kMean) {
      divide(out, at(s.inputs[0]), n, s.dtype, divisor);
    } else {
      std::memcpy(out, at(s.inputs[0]), n * es);
    }
    return;
  }
  const ReduceOp pairwise = op == ReduceOp::kMean ? ReduceOp::kSum : op;
  const void* acc = at(s.inputs[0]);
  for (size_t r = 1; r < m; ++r) {
    if (op == ReduceOp::kMean && r + 1 == m) {
      reduce_divide(out, acc, at(s.inputs[r]), n, s.dtype, divisor);
    } else {
      reduce(out, acc, at(s.inputs[r]), n, s.dtype, pairwise);
    }
    acc = out;
  }
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
    for (const Chunk& c : chunks) reduce_chunk(c, op, mean_divisor);
    count(CounterKind::kReducedBytes, bytes);
    return;
  }
  parallel_for(chunks.size(), [&](size_t i) {
    try {
      reduce_chunk(chunks[i], op, mean_divisor);
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
