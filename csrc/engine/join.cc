// A joined rank's part in the others' collectives (Communicator::join,
// docs/negotiation.md "Join"): the negotiation decided a collective that
// every rank but the joined ones asked for; this rank runs it too, with a
// request of its own whose input changes nothing (the reduction's identity,
// no rows) and whose output goes to scratch.
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "common/error.h"
#include "engine/driver.h"
#include "engine/engine_config.h"
#include "engine/round_record.h"

namespace pytfcomm {

namespace {

// `count` elements of `dtype` that leave a reduction by `op` unchanged.
std::vector<char> identity(ReduceOp op, DType dtype, size_t count) {
  const size_t esize = dtype_size(dtype);
  std::vector<char> buf(count * esize, 0);
  if (op == ReduceOp::kSum || op == ReduceOp::kMean || count == 0) return buf;
  auto fill = [&](auto value) {
    for (size_t i = 0; i < count; ++i) std::memcpy(buf.data() + i * esize, &value, esize);
  };
  const bool lowest = op == ReduceOp::kMax;  // min: the highest; prod: one
  switch (dtype) {
    case DType::kFloat16:
      fill(uint16_t(op == ReduceOp::kProd ? 0x3C00 : lowest ? 0xFC00 : 0x7C00));
      break;
    case DType::kBFloat16:
      fill(uint16_t(op == ReduceOp::kProd ? 0x3F80 : lowest ? 0xFF80 : 0x7F80));
      break;
    case DType::kFloat32:
      fill(op == ReduceOp::kProd
               ? 1.0f
               : (lowest ? -1.0f : 1.0f) * std::numeric_limits<float>::infinity());
      break;
    case DType::kFloat64:
      fill(op == ReduceOp::kProd ? 1.0
                                 : (lowest ? -1.0 : 1.0) * std::numeric_limits<double>::infinity());
      break;
    case DType::kInt8:
      fill(int8_t(op == ReduceOp::kProd ? 1 : lowest ? INT8_MIN : INT8_MAX));
      break;
    case DType::kUInt8:
      fill(uint8_t(op == ReduceOp::kProd ? 1 : lowest ? 0 : UINT8_MAX));
      break;
    case DType::kInt32:
      fill(int32_t(op == ReduceOp::kProd ? 1 : lowest ? INT32_MIN : INT32_MAX));
      break;
    case DType::kInt64:
      fill(int64_t(op == ReduceOp::kProd ? 1 : lowest ? INT64_MIN : INT64_MAX));
      break;
    case DType::kBool:
      fill(uint8_t(lowest ? 0 : 1));  // max is "any": false; min and prod are "all": true
      break;
    default:
      PTC_THROW(kInternal, "no identity for dtype ", dtype_name(dtype));
  }
  return buf;
}

}  // namespace

void Driver::run_adopted(const Decision& d) {
  queue_.adopt(d.key, d.mismatch.empty());
  if (!d.mismatch.empty()) return;  // the ranks that asked raise; nothing moves
  using algorithms::CollectiveKind;
  Request r;
  r.key = d.key;
  r.desc = d.desc;
  r.label = "this joined rank's part";
  r.timeout_s = cfg_.timeout_s;
  std::vector<char> in, out;
  std::vector<uint64_t> send(static_cast<size_t>(cfg_.size), 0);
  std::vector<uint64_t> recv(static_cast<size_t>(cfg_.size), 0);
  const size_t count = static_cast<size_t>(d.desc.count);
  switch (d.desc.kind) {
    case CollectiveKind::kAllreduce:
    case CollectiveKind::kReduceScatter:
      in = identity(d.desc.op, d.desc.dtype, count);
      out.resize(in.size());
      break;
    case CollectiveKind::kBroadcast:
      out.resize(count * dtype_size(d.desc.dtype));
      break;
    case CollectiveKind::kAllgatherv:
    case CollectiveKind::kAlltoallv:
      r.desc.count = 0;  // no rows of its own, to anyone
      r.send_counts = send.data();
      r.recv_counts = recv.data();
      r.alloc_out = [&out, &r](uint64_t total) -> void* {
        out.resize(static_cast<size_t>(total) * dtype_size(r.desc.dtype) + 1);
        return out.data();
      };
      break;
    case CollectiveKind::kBarrier:
      break;
    default:
      PTC_THROW(kInternal, "a joined rank cannot take part in ", describe(d.desc));
  }
  r.in =
      in.empty() ? (d.desc.kind == CollectiveKind::kBroadcast ? out.data() : nullptr) : in.data();
  if (!r.out) r.out = out.empty() ? nullptr : out.data();
  executor_.execute(r, d);  // a failure here is the engine's: it fails every rank's requests
}

}  // namespace pytfcomm
