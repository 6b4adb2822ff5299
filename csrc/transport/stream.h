// The byte stream under a Pair (host/pair.h). Pair owns the framing
// (headers, metadata checks, ABORT frames, FIFO queues); a stream only moves
// bytes, with the non-blocking socket conventions so every kind reads alike:
//   > 0   bytes moved;
//   0     (reads only) the peer is gone and nothing is left to read;
//   -1    errno set: EAGAIN when it would block, anything else is fatal.
// EINTR is retried inside. A stream never blocks and never throws.
//
// What only some streams can do is a small interface of its own, which a
// stream lists in features(). The Pair asks once, when it is made, and keeps
// the pointers: no per-frame virtual call or cast for a feature a stream
// lacks, and a wrapper (ReadAheadStream) passes on its inner stream's
// features without forwarding each call.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pytfcomm::transport {

// Streams whose readiness epoll cannot report (shared memory): the transport
// polls them and sleeps on its futex doorbell instead, and learns of the
// peer's death from a side connection (liveness_fd()).
class PolledStream {
 public:
  virtual ~PolledStream() = default;
  // Called when epoll reports something on liveness_fd().
  virtual void on_liveness_event() noexcept = 0;
  // True once the peer is known to be gone.
  virtual bool peer_gone() const = 0;
};

// Streams that may keep reading a send's memory after writev_some took it
// (a shared-memory peer copying straight from it). A send is complete once
// released() reaches the release_ticket() read right after writing it.
class ReleasingStream {
 public:
  virtual ~ReleasingStream() = default;
  virtual uint64_t release_ticket() const = 0;
  virtual uint64_t released() = 0;
  // The size in bytes of the collective the following writes belong to: the
  // stream may lend large collectives' memory instead of copying it.
  virtual void set_collective_bytes(uint64_t bytes) noexcept = 0;
};

// Last words beside the data (shared memory): a fixed place for the reason
// this side gives up, which the peer can read however full the data path is.
// Streams without it carry the reason in band (an ABORT frame).
class NoteStream {
 public:
  virtual ~NoteStream() = default;
  virtual bool leave_note(const char* text, size_t n, uint32_t flags) noexcept = 0;
  // The note the peer left there, if any (*text at most a few KiB).
  virtual bool peer_note(std::string* text, uint32_t* flags) const = 0;
};

// Streams over kernel sockets, whose in-band last words need an orderly end:
// no writes after what was written (the peer reads EOF after it), and how
// many written bytes the peer's side has not acknowledged yet.
class HalfCloseStream {
 public:
  virtual ~HalfCloseStream() = default;
  virtual void shutdown_write() noexcept = 0;
  virtual size_t unsent() const noexcept = 0;
};

// Streams that may read what arrived into memory before anyone asked for it
// (tcp/read_ahead_stream.h).
class ReadAheadCapable {
 public:
  virtual ~ReadAheadCapable() = default;
  // True if bytes moved.
  virtual bool read_ahead() noexcept = 0;
};

// The features a stream has (null: it lacks that one). They live as long as
// the stream.
struct StreamFeatures {
  PolledStream* polled = nullptr;
  ReleasingStream* releasing = nullptr;
  NoteStream* notes = nullptr;
  HalfCloseStream* half_close = nullptr;
  ReadAheadCapable* read_ahead = nullptr;
};

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

  virtual StreamFeatures features() { return {}; }
};

}  // namespace pytfcomm::transport
