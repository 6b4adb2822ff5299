// One GPU collective as the backend runs it, whichever path it came from:
// the TF kernels (gpu/stream_collectives.h: a group of members, one per
// local GPU, each on TensorFlow's stream) or the DLPack bindings
// (gpu/gpu_comm.h: one member on pytfcomm's stream of the device).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/collective_kind.h"
#include "common/digest.h"
#include "common/error.h"
#include "gpu/gpu_params.h"
#include "gpu/stream_collectives.h"

namespace pytfcomm {
class Communicator;
}

namespace pytfcomm::gpu {

struct Member {
  CUstream stream = nullptr;
  CUcontext ctx = nullptr;
  int device = -1;
  std::vector<StreamTensor> tensors;
  StreamDone done;  // the TF kernels': empty once handed on
};

struct Group {
  StreamCall call;
  std::vector<Member> members;  // by group rank
  // The DLPack path's: the transport it asked for, its shape digest, and
  // whether algorithm='hierarchical' means NCCL's two levels (the TF
  // kernels' algorithm is only that of the staged cross-process step).
  Backend backend = Backend::kAuto;
  uint32_t shape_tag = 0;
  bool nccl_hierarchical = false;
  // The staged body's host collectives carry the call's digest as their
  // shape tag (the DLPack path's chunks): its first one fails on every rank
  // that disagrees, so no separate round checks the digest first.
  bool staged_carries_digest = false;
  // The TF kernels' rendezvous.
  int arrived = 0;
  TimePoint deadline;   // of the rendezvous
  bool closed = false;  // launched or failed: its rendezvous watch stops
};

// "GPU all-reduce" etc., for messages.
const char* op_label(StreamOp op);
// The engine's kind of the operation.
CollectiveKind collective_kind(StreamOp op);

// Calls m.done(e) unless it was handed on already.
void finish(Member& m, std::exception_ptr e);

// An Error of `kind` as an exception_ptr, for completion callbacks.
std::exception_ptr error_ptr(ErrorKind kind, const std::string& msg);

// What every process must agree on before a GPU collective runs: operation,
// reduction, root, algorithm, transport asked for, shape digest, number of
// GPUs and every tensor's count and dtype, mixed into an FNV-1a digest of
// `Hash`'s width (common/digest.h). The one list of a call's fields: the
// host round's tag (call_digest) and the compact check's key
// (gpu/verify_cache.h) are this at 32 and 64 bits.
template <typename Hash>
FieldDigest<Hash> call_fields(const Group& g) {
  FieldDigest<Hash> d;
  d.mix(static_cast<uint64_t>(g.call.op))
      .mix(static_cast<uint64_t>(g.call.reduce))
      .mix(static_cast<uint64_t>(g.call.root))
      .mix(static_cast<uint64_t>(g.call.algorithm))
      .mix(static_cast<uint64_t>(g.backend))
      .mix(g.shape_tag)
      .mix(g.members.size());
  for (const StreamTensor& t : g.members[0].tensors) {
    d.mix(t.count).mix(static_cast<uint64_t>(t.dtype));
  }
  return d;
}

// call_fields at 32 bits, the shape tag of the call's host collectives.
// Never 0 (a host collective's "no shape").
uint32_t call_digest(const Group& g);

// Members of one group must pass the same tensors (counts and dtypes).
void check_members(const Group& g);

}  // namespace pytfcomm::gpu
