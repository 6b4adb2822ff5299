// Every tunable read from the environment, in one registry (NCCL's PARAM
// idea): each value is parsed once, validated, and reported by `info`.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace pytfcomm {

struct Params {
  double timeout_s;           // PYTFCOMM_TIMEOUT: a collective's deadline
  double connect_timeout_s;   // PYTFCOMM_CONNECT_TIMEOUT: rendezvous and connects
  int64_t spin_us;            // PYTFCOMM_SPIN_US: busy-poll before blocking (-1: auto)
  int64_t segment_bytes;      // PYTFCOMM_SEGMENT_BYTES: pipeline segment of the ring
  int64_t small_bytes;        // PYTFCOMM_SMALL_BYTES: at or below, latency algorithms
  int64_t sockbuf_bytes;      // PYTFCOMM_SOCKET_BUFFER: SO_SNDBUF/SO_RCVBUF
  int64_t max_message_bytes;  // PYTFCOMM_MAX_MESSAGE: cap on one frame's payload
  int log_level;              // PYTFCOMM_LOG_LEVEL: 0 error, 1 warn, 2 info, 3 debug
  std::string transport;      // PYTFCOMM_TRANSPORT: auto | tcp | shm
  int64_t shm_ring_bytes;     // PYTFCOMM_SHM_RING_BYTES: each shared-memory ring (power of 2)
  int64_t shm_by_ref_bytes;   // PYTFCOMM_SHM_BYREF_BYTES: single-copy (CMA) from here; 0: off
  int64_t oneshot_bytes;      // PYTFCOMM_ONESHOT_BYTES: one-shot all-reduce up to here; 0: off
  int64_t tcp_streams;        // PYTFCOMM_TCP_STREAMS: connections per pair of hosts (0: auto)
  int64_t tcp_stripe_bytes;   // PYTFCOMM_TCP_STRIPE_BYTES: bytes per connection in turn

  // Tensor fusion (engine/fusion.h)
  int64_t fusion_bytes;           // PYTFCOMM_FUSION_BYTES: largest fusion buffer
  int64_t fusion_direct_bytes;    // PYTFCOMM_FUSION_DIRECT_BYTES: from here, no packing; 0: off
  double fusion_cycle_ms;         // PYTFCOMM_FUSION_CYCLE_MS: how long async requests gather
  std::string timeline;           // PYTFCOMM_TIMELINE: Chrome-trace file per rank ("": off)
  double stall_warning_s;         // PYTFCOMM_STALL_WARNING: warn after this long stalled (0: off)
  int64_t tf_buffer_cache_bytes;  // PYTFCOMM_TF_BUFFER_CACHE: idle TF output buffers kept
  double peer_timeout_s;  // PYTFCOMM_PEER_TIMEOUT: a silent peer is lost after this (0: off)
};

// Parsed on first use; a malformed value throws a kConfig error naming it
// (and is parsed again at the next call, so a corrected environment works).
const Params& params();
// Parses the environment again (every new communicator does, so that a job
// sees the variables as they are when it starts); throws like params() and
// keeps the previous values then. References from params() stay valid.
void reload_params();

// (name, value-as-text) of every parameter, for `python -m pytfcomm info`.
std::vector<std::pair<std::string, std::string>> describe_params();

}  // namespace pytfcomm
