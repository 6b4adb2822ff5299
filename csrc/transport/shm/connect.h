// Setting up shared memory between the ranks of one host, over the TCP
// connections bootstrap already made (and authenticated). Every rank creates
// one segment for its inbound rings and offers its name to each local peer;
// peers map it and acknowledge; then the creator unlinks the name at once.
// From then on the memory lives only as long as some process maps it, so
// nothing is ever left in /dev/shm, whatever way the processes end.
//
// Whether two ranks share a host is first guessed from host_id; a peer that
// cannot open our segment is not on this host after all and keeps TCP.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "transport/net/peer.h"
#include "transport/net/socket.h"
#include "transport/shm/segment.h"
#include "transport/shm/stream.h"

namespace pytfcomm::shm {

enum class Mode { kAuto, kTcp, kShm };

// "auto" | "tcp" | "shm" (case-insensitive); throws kConfig otherwise.
Mode parse_mode(const std::string& text);
const char* mode_name(Mode m);

struct LocalLinks {
  std::shared_ptr<Mapping> own;  // this rank's segment (its doorbell); null if unused
  // streams[r]: the shared-memory stream to rank r, or null (TCP, or self).
  // A rank with a stream gave its TCP connection to it (liveness only).
  std::vector<std::unique_ptr<ShmStream>> streams;
  // segments[r]: rank r's segment as mapped here (this rank's own at
  // index rank), wherever a stream exists; for the one-shot areas.
  std::vector<std::shared_ptr<Mapping>> segments;
  // Collectives of at least this many bytes per rank lend their large pieces
  // by reference to the peers that read this rank's memory (0: none does).
  size_t by_ref_bytes = 0;
};

// Exchanges offers with every rank of equal host_id (whatever the mode, so
// that ranks configured differently still agree per pair), over fds[r], the
// authenticated connection to rank r; a rank that gets a stream hands its
// connection to it. kShm throws
// kConfig when any peer is remote or any local peer cannot share memory.
// Collectives of by_ref_bytes or more per rank send their large pieces by
// reference where the receiver can read the sender's memory (0: never).
// oneshot_bytes sizes this rank's one-shot area (0: none).
LocalLinks connect_local_peers(int rank, const std::vector<net::PeerInfo>& peers,
                               std::vector<net::Fd>& fds, Mode mode, size_t ring_bytes,
                               size_t by_ref_bytes, size_t oneshot_bytes, TimePoint deadline);

}  // namespace pytfcomm::shm
