// Connecting a rank to its job: the one way to get a Transport for real
// ranks. Behind it (connect.cc): the TCP rendezvous and connections
// (tcp/bootstrap.h), the topology, shared memory between ranks of one host
// (shm/connect.h), extra TCP streams between hosts (tcp/extra_streams.h),
// how waits spin or yield (host/wait_policy.h), and the setup agreement
// every rank must share (negotiation rounds and liveness), all combined in
// one host::HostTransport. Callers see only transport.h and this header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "transport/job.h"
#include "transport/topology.h"
#include "transport/transport.h"

namespace pytfcomm::transport {

// Sizes of the negotiation records (engine/round_record.h) the transport
// must carry in its rounds.
struct RoundOptions {
  size_t table_bytes = 0;     // room for a record's table on top of its inputs
  size_t area_inputs = 0;     // inputs a record may carry in a one-shot area
  size_t frame_inputs = 0;    // inputs a record may carry as a frame (this rank's offer)
  size_t min_area_bytes = 0;  // below this, areas are too small for rounds: frames
};

struct ConnectOptions {
  JobOptions job;
  std::string mode;  // "auto" | "tcp" | "shm" (throws kConfig otherwise)
  RoundOptions rounds;
};

// Element-wise minimum of `n` values over every rank, in place, over `t`.
// Setup needs this one collective; the transport layer knows no algorithms
// (they sit above it), so the caller supplies it.
using AgreeMin = std::function<void(Transport& t, int64_t* values, size_t n)>;

struct Connection {
  std::unique_ptr<Transport> transport;
  Topology topology;
  uint16_t root_port = 0;  // the port rank 0 bound (differs when asked for 0)
  std::string mode;        // the transport mode as asked ("auto", "tcp", "shm")
  int shm_peers = 0;       // peers reached through shared memory
  int64_t spin_us = 0;     // how long waits poll before they block
  double beat_s = 0;       // heartbeat interval agreed (0: liveness off)
  // Collectives of at least this many bytes per rank lend pieces by reference
  // to peers on this host that read this rank's memory (0: none does).
  size_t shm_by_ref_bytes = 0;
  // Pipeline segments of the ring (agreed: every rank must cut alike): the
  // smallest PYTFCOMM_SEGMENT_BYTES of the ranks, and, when ranks outnumber
  // cores on some host, the smallest PYTFCOMM_OVERSUB_SEGMENT_BYTES (else 0).
  size_t segment_bytes = 0;
  size_t oversub_segment_bytes = 0;
  // The largest all-reduce auto runs by halving-doubling (the smallest
  // PYTFCOMM_HALVING_BYTES of the ranks; 0: never).
  size_t halving_bytes = 0;
  // Every rank reaches every other through shared memory (agreed).
  bool all_shared_memory = false;
  // Where some host runs more ranks than it has cores: the smallest
  // shm_by_ref_bytes of its ranks (0: no such host, or nothing read by reference).
  size_t shm_halving_from = 0;
  // The largest first step sent ahead (the smallest PYTFCOMM_AHEAD_BYTES of
  // the ranks; 0 where records go through the areas, or off).
  size_t ahead_bytes = 0;
};

// Connects rank `o.job.rank` to every other rank and agrees with them (through
// `agree`, when there are several) on what all must do alike. The transport
// comes back with no deadline and no round armed. Throws what bootstrap
// throws (kConfig, kAuth, kPeerLost, kTimeout).
Connection connect(const ConnectOptions& o, const AgreeMin& agree);

}  // namespace pytfcomm::transport
