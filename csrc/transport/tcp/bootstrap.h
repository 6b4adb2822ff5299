// Rendezvous: every rank registers with rank 0, learns everyone's listening
// address, then opens one connection per pair of ranks (the higher rank
// connects). Listeners bind only the configured address and are closed
// before bootstrap returns, so a running job exposes no port.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "transport/job.h"
#include "transport/net/peer.h"
#include "transport/net/socket.h"

namespace pytfcomm::tcp {

struct BootstrapResult {
  std::vector<net::Fd> fds;          // fds[r]: connection to rank r (invalid for self)
  std::vector<net::PeerInfo> peers;  // every rank, including this one
  uint16_t root_port = 0;            // the port rank 0 actually bound (differs when asked for 0)
  // extra_fds[r]: more connections to rank r, striped with fds[r] in this
  // order (multi-stream TCP, extra_streams.h); empty for a single stream.
  std::vector<std::vector<net::Fd>> extra_fds;
};

BootstrapResult bootstrap(const transport::JobOptions& opts);

}  // namespace pytfcomm::tcp
