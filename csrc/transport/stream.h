// The byte stream under a Pair. Pair owns the framing (headers, metadata
// checks, ABORT frames, FIFO queues); a stream only moves bytes, with the
// non-blocking socket conventions so both kinds read alike:
//   > 0   bytes moved;
//   0     (reads only) the peer is gone and nothing is left to read;
//   -1    errno set: EAGAIN when it would block, anything else is fatal.
// EINTR is retried inside. A stream never blocks and never throws.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pytfcomm::transport {

class ByteStream {
 public:
  virtual ~ByteStream() = default;

  virtual ssize_t writev_some(const iovec* iov, int n) = 0;
  virtual ssize_t read_some(void* data, size_t n) = 0;
  // Like read_some but leaves the bytes in the stream.
  virtual ssize_t peek(void* data, size_t n) = 0;
  // Tell the peer we are gone (it sees EOF) and release everything.
  virtual void close() noexcept = 0;

  // The TCP socket that tells whether the peer process is alive (its data
  // socket for a TCP stream; a side connection for shared memory).
  virtual int liveness_fd() const = 0;
  // Every descriptor whose readiness matters (epoll watches them all).
  virtual std::vector<int> event_fds() const { return {liveness_fd()}; }
  // True for streams whose readiness epoll cannot report (shared memory):
  // the transport must poll them and wait on the futex doorbell instead.
  virtual bool needs_polling() const = 0;
  // Called when epoll reports something on liveness_fd() of a polled stream.
  virtual void on_liveness_event() noexcept {}

  // Streams may keep reading a send's memory after writev_some took it (a
  // shared-memory peer copying straight from it). A send is complete once
  // released() reaches the release_ticket() read right after writing it.
  virtual uint64_t release_ticket() const { return 0; }
  virtual uint64_t released() { return 0; }
  // True once the peer is known to be gone (a send waiting for release()
  // would wait forever).
  virtual bool peer_gone() const { return false; }

  // Last words beside the data (shared memory): a fixed place for the reason
  // this side gives up, which the peer can read however full the data path
  // is. False where the stream has none: the reason then goes in band.
  virtual bool leave_note(const char* text, size_t n, uint32_t flags) noexcept { return false; }
  // The note the peer left there, if any (*text at most a few KiB).
  virtual bool peer_note(std::string* text, uint32_t* flags) const { return false; }
  // In-band last words: no writes after what was written (the peer reads EOF
  // after it), and how many written bytes the peer's side has not received
  // yet (0 where that cannot be known).
  virtual void shutdown_write() noexcept {}
  virtual size_t unsent() const noexcept { return 0; }
  // Streams over kernel sockets may read what arrived into memory before
  // anyone asked for it (tcp/read_ahead_stream.h); true if bytes moved.
  virtual bool read_ahead() noexcept { return false; }
};

}  // namespace pytfcomm::transport
