#include "transport/tcp/peer_stream.h"

#include <algorithm>

#include "common/error.h"
#include "common/param.h"
#include "transport/tcp/read_ahead_stream.h"
#include "transport/tcp/socket_stream.h"
#include "transport/tcp/striped_stream.h"

namespace pytfcomm::tcp {

std::unique_ptr<transport::ByteStream> make_peer_stream(std::vector<net::Fd> fds, int peer) {
  const int64_t sockbuf = params().sockbuf_bytes;
  for (net::Fd& fd : fds) {
    PTC_ENFORCE(fd.valid(), "no connection to rank ", peer, " after bootstrap");
    net::set_nonblocking(fd.get());
    net::tune_data_socket(fd.get(), sockbuf);
  }
  const size_t conns = fds.size();
  PTC_ENFORCE(conns > 0, "no connection to rank ", peer, " after bootstrap");
  std::unique_ptr<transport::ByteStream> stream;
  if (conns == 1) {
    stream = std::make_unique<SocketStream>(std::move(fds.front()));
  } else {
    stream = std::make_unique<StripedStream>(std::move(fds),
                                             static_cast<size_t>(params().tcp_stripe_bytes));
  }
  // Room for what the kernel may queue (it doubles SO_RCVBUF), per connection.
  size_t queue = sockbuf > 0 ? 2 * static_cast<size_t>(sockbuf) : size_t{8} << 20;
  return std::make_unique<ReadAheadStream>(std::move(stream),
                                           std::min<size_t>(queue * conns, size_t{64} << 20));
}

}  // namespace pytfcomm::tcp
