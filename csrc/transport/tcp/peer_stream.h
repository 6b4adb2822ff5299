// The byte stream to one peer over TCP, from the connections setup made to
// it (the bootstrap one first, then any extra ones in stripe order).
#pragma once

#include <memory>
#include <vector>

#include "transport/net/socket.h"
#include "transport/stream.h"

namespace pytfcomm::tcp {

// Tunes every connection (PYTFCOMM_SOCKET_BUFFER), stripes them when there
// are several (PYTFCOMM_TCP_STRIPE_BYTES) and reads ahead on top
// (read_ahead_stream.h). Throws kInternal for an invalid connection.
std::unique_ptr<transport::ByteStream> make_peer_stream(std::vector<net::Fd> fds, int peer);

}  // namespace pytfcomm::tcp
