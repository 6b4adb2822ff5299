// Multi-stream TCP (PYTFCOMM_TCP_STREAMS): extra connections for pairs of
// ranks on different hosts, opened after bootstrap over a short-lived,
// authenticated listener, then striped by StripedStream.
#pragma once

#include <string>
#include <vector>

#include "common/clock.h"
#include "transport/tcp/bootstrap.h"

namespace pytfcomm::tcp {

// Over the bootstrap connection of every rank r with eligible[r] (a TCP pair
// between hosts), both sides offer how many streams they want; the pair uses
// the smaller count k. The higher rank opens streams 1..k-1 to the lower
// rank's listener with the data handshake (HMAC when there is a secret), in
// the same order as bootstrap (connect down, then accept up), so no cycle of
// waits can form. Fills boot.extra_fds[r] with the k-1 extra connections in
// stripe order (empty for k = 1). Throws kPeerLost / kTimeout / kAuth.
void connect_extra_streams(int rank, BootstrapResult& boot, const std::vector<bool>& eligible,
                           int streams, const std::string& secret, TimePoint deadline);

}  // namespace pytfcomm::tcp
