// Who a rank is and where it listens, as bootstrap learned it: shared by the
// TCP bootstrap that fills it and the shared-memory setup that reads it.
#pragma once

#include <cstdint>
#include <string>

namespace pytfcomm::net {

struct PeerInfo {
  int rank = 0;
  std::string host;
  uint16_t port = 0;
  std::string host_id;  // ranks with equal host_id share a machine
};

}  // namespace pytfcomm::net
