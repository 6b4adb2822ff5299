// Collective algorithms. Each is written only against transport::DataPlane
// (transport/data_plane.h) and runs on any Group (the whole job or a subset
// such as one host), so composed algorithms (hierarchical) reuse them.
//
// Element-wise reductions are applied in an order that makes every rank's
// result bitwise identical: each output element is computed by exactly one
// rank and copied to the others (ring), or computed by pairs in a canonical
// lower-rank-first order (recursive doubling).
#pragma once

#include <cstddef>
#include <cstdint>

#include "algorithms/collective.h"
#include "common/dtype.h"

namespace pytfcomm::algorithms {

// A group of one: out = in, divided for a mean.
void single_member_allreduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                             int64_t divisor);

// out = reduce over the group of in. `in` may equal `out`. For kMean the sum
// is divided by `divisor` (the number of contributions in the whole job).
// Chunked and pipelined: reduce-scatter then all-gather, segment by segment.
void ring_allreduce(const Context& c, const Group& g, Phase phase, const void* in, void* out,
                    size_t count, DType dtype, ReduceOp op, int64_t divisor);

// Latency-optimal for small buffers: log2(n) exchanges of the whole buffer.
void recursive_doubling_allreduce(const Context& c, const Group& g, Phase phase, const void* in,
                                  void* out, size_t count, DType dtype, ReduceOp op,
                                  int64_t divisor);

// Reduce-scatter by recursive halving, all-gather by recursive doubling
// (halving_doubling.cc): the ring's bytes in 2 log2(n) pairwise exchanges.
void halving_doubling_allreduce(const Context& c, const Group& g, Phase phase, const void* in,
                                void* out, size_t count, DType dtype, ReduceOp op, int64_t divisor);

// What a pairwise all-reduce (`phase` kRecursiveDoubling or
// kHalvingDoubling) of `count` elements over `g` sends first: elements
// [begin, begin + count) of its input, to global rank `peer`, who sends the
// like back. Only where every member takes part in the pairwise steps (a
// power of two of them, no fold); else peer is -1.
struct FirstSend {
  int peer = -1;
  size_t begin = 0;
  size_t count = 0;
};
FirstSend first_send(Phase phase, const Group& g, size_t count);

// Ring reduce-scatter over the balanced split of `count` elements: the member
// with group index i ends with part i reduced, written at its own offset in
// `out` (a full-size buffer). Other parts of `out` are left unspecified.
void ring_reduce_scatter_inplace(const Context& c, const Group& g, Phase phase, const void* in,
                                 void* out, size_t count, DType dtype, ReduceOp op,
                                 int64_t divisor);

// Ring all-gather of the balanced split of `count` elements held in place in
// `buf`: member i contributes part i.
void ring_allgather_inplace(const Context& c, const Group& g, Phase phase, void* buf, size_t count,
                            DType dtype);

// reduce-scatter with equal parts: out (count/n elements) = part g.me of the
// reduction of in (count elements). count must be divisible by the group size.
void reduce_scatter(const Context& c, const Group& g, const void* in, void* out, size_t count,
                    DType dtype, ReduceOp op, int64_t divisor);

// Every member gets `count` elements from each member, in member order.
void allgather(const Context& c, const Group& g, const void* in, void* out, size_t count,
               DType dtype);

// Every member gets counts[i] elements from member i, in member order
// (`out` holds their sum; counts may be 0). Ring: each step forwards one
// block at its own size.
void allgatherv(const Context& c, const Group& g, const void* in, void* out, const uint64_t* counts,
                DType dtype);

// The first part of an all-to-all with sizes: recv_counts[i] = what member
// i sends this one (its send_counts[me]); one 8-byte message to and from
// every peer.
void alltoallv_counts(const Context& c, const Group& g, const uint64_t* send_counts,
                      uint64_t* recv_counts);

// Member i gets send_counts[i] elements of `in` (blocks in member order);
// `out` receives recv_counts[j] elements from member j, in member order.
// Pairwise exchange: step k sends to me + k and receives from me - k.
void alltoallv(const Context& c, const Group& g, const void* in, const uint64_t* send_counts,
               void* out, const uint64_t* recv_counts, DType dtype);

// buf on every member = buf of member `root` (group index).
void broadcast(const Context& c, const Group& g, void* buf, size_t count, DType dtype, int root);

void barrier(const Context& c, const Group& g);

// Two-level all-reduce: reduce-scatter inside each host, all-reduce of each
// part across hosts, all-gather inside each host. `local` is this host's
// group, `cross` the group of ranks with this rank's local index.
void hierarchical_allreduce(const Context& c, const Group& local, const Group& cross,
                            const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                            int64_t divisor, size_t small_bytes);

}  // namespace pytfcomm::algorithms
