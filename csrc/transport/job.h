// Who this rank is in its job and where the job meets: what every transport
// needs before it can connect (tcp/bootstrap.h takes it as is).
#pragma once

#include <cstdint>
#include <string>

namespace pytfcomm::transport {

struct JobOptions {
  int rank = 0;
  int size = 1;
  std::string root_host;  // rank 0's rendezvous address
  uint16_t root_port = 0;
  std::string bind_host;  // this rank's listener; "" = the address that routes to rank 0
  std::string host_id;    // ranks with equal host_id share a machine
  double connect_timeout_s = 120;
  std::string secret;  // PYTFCOMM_SECRET; "" = no authentication (docs/security.md)
};

}  // namespace pytfcomm::transport
