// Accepting connections during bootstrap: many at once, each with its own
// deadline and strict validation, so a stray or hostile client (random
// bytes, a wrong protocol, a stalled sender) is dropped and logged while the
// job's own ranks get through.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "transport/tcp/socket.h"
#include "transport/wire.h"

namespace pytfcomm::tcp {

struct AcceptedPeer {
  Fd fd;
  wire::Hello hello{};
  SockAddr from;
};

// Returns an empty string when `hello` is acceptable, else why it is not.
// A kConfig error thrown from it aborts the whole accept (a rank of our own
// job misconfigured); a returned reason just drops that one connection.
using HelloCheck = std::function<std::string(const wire::Hello&, const SockAddr&)>;

// Called before a kConfig error from `check` propagates, with the peers
// accepted so far and the offending connection, so they can be told why.
using FatalHook = std::function<void(std::vector<AcceptedPeer>& accepted, int offender_fd,
                                     const std::string& why)>;

// Accept until `count` connections passed `check`, or throw at `deadline`.
std::vector<AcceptedPeer> accept_peers(int listener, int count, const HelloCheck& check,
                                       TimePoint deadline, const std::string& what,
                                       const FatalHook& on_fatal = nullptr);

wire::Hello make_hello(wire::HelloPurpose purpose, int rank, int size, uint16_t listen_port,
                       const std::string& listen_host, const std::string& host_id);

// Structural validation shared by every receiver: magic, version, purpose,
// NUL-terminated strings. Returns "" when fine.
std::string validate_hello(const wire::Hello& h);

}  // namespace pytfcomm::tcp
