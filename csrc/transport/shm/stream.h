// ByteStream between two ranks of one host: two single-producer/single-
// consumer rings of records, the inbound one in this rank's segment and the
// outbound one in the peer's. Each side caches the other's counter and
// reloads it only when its cached view runs dry.
//
// Pieces are copied through the ring, except in large collectives (at least
// the by-reference threshold per rank, as the Pair reports with
// set_collective_bytes()): there a piece of kMinByReference bytes or more
// travels as its address instead. The consumer copies it straight from the
// producer's memory with process_vm_readv (one copy instead of two) and bumps
// `released`; the producer's send completes only then (Pair asks
// release_ticket()/released()). Setup enables this per direction only where
// a probe read succeeded (ptrace permission).
//
// The pair's TCP connection stays open beside it, silent, as the liveness
// signal: the kernel closes it when the peer dies, however it dies. A peer
// that gives up first leaves its reason in the ring's abort note (layout.h).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "transport/net/socket.h"
#include "transport/shm/doorbell.h"
#include "transport/shm/segment.h"
#include "transport/stream.h"

namespace pytfcomm::shm {

struct RingView {
  std::shared_ptr<Mapping> segment;  // keeps the mapping alive
  RingCtl* ctl = nullptr;
  char* data = nullptr;
  uint64_t bytes = 0;  // a power of two
};

struct ByReference {
  pid_t peer_pid = 0;    // where by-reference payloads we receive live
  size_t send_from = 0;  // collectives of this many bytes or more send by reference; 0: never
};

// Smaller pieces always go through the ring: pinning the pages costs more
// than the copy it saves.
constexpr size_t kMinByReference = size_t{64} << 10;

class ShmStream : public transport::ByteStream,
                  public transport::PolledStream,
                  public transport::ReleasingStream,
                  public transport::NoteStream {
 public:
  // in: the ring the peer writes to us (our segment); out: the ring we write
  // to the peer (its segment); peer_bell: the peer's doorbell.
  ShmStream(RingView in, RingView out, Doorbell peer_bell, net::Fd liveness, ByReference ref);
  ~ShmStream() override { close(); }

  ssize_t writev_some(const iovec* iov, int n) override;
  ssize_t read_some(void* data, size_t n) override;
  ssize_t peek(void* data, size_t n) override;
  void close() noexcept override;
  int liveness_fd() const override { return sock_.get(); }
  transport::StreamFeatures features() override {
    transport::StreamFeatures f;
    f.polled = this;
    f.releasing = this;
    f.notes = this;
    return f;
  }
  void on_liveness_event() noexcept override;
  uint64_t release_ticket() const override { return ref_posted_; }
  uint64_t released() override;
  void set_collective_bytes(uint64_t bytes) noexcept override;
  bool peer_gone() const override { return peer_gone_; }
  bool leave_note(const char* text, size_t n, uint32_t flags) noexcept override;
  bool peer_note(std::string* text, uint32_t* flags) const override;

 private:
  uint64_t readable();  // bytes published in the inbound ring; sets corrupt_
  uint64_t writable();
  bool next_record();  // parse the next tag if one is there; false if none
  void consume(uint64_t bytes);

  RingView in_, out_;
  Doorbell peer_bell_;
  net::Fd sock_;
  ByReference ref_;
  uint64_t in_tail_ = 0, in_head_seen_ = 0;    // our read position, last head seen
  uint64_t out_head_ = 0, out_tail_seen_ = 0;  // our write position, last tail seen
  uint64_t rec_left_ = 0;                      // payload bytes left in the current record
  uint64_t rec_pad_ = 0;                       // padding after it (inline records)
  uint64_t rec_addr_ = 0;                      // by-reference: where the rest is
  bool rec_ref_ = false;
  bool send_by_ref_ = false;   // the collective being written is large enough
  uint64_t ref_posted_ = 0;    // bytes we sent by reference
  uint64_t ref_received_ = 0;  // bytes we copied by reference
  bool corrupt_ = false;
  bool peer_gone_ = false;
  bool closed_ = false;
};

}  // namespace pytfcomm::shm
