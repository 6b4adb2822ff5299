// A collective's first message sent right behind this rank's record of a
// round (round_channel.h, docs/negotiation.md): an AHED frame that the peer
// takes in whenever it reads, like a record, and uses once the round decided
// that collective, or drops when the next round is armed.
#include <cstring>

#include "common/error.h"
#include "transport/host/transport.h"
#include "transport/wire_check.h"

namespace pytfcomm::host {

void HostTransport::set_ahead_limit(size_t bytes) {
  ahead_bytes_ = area_bytes_ ? 0 : bytes;
  for (auto& p : pairs_) {
    if (p) p->set_ahead_capacity(ahead_bytes_);
  }
}

bool HostTransport::ahead_room(int peer, size_t nbytes) const {
  if (ahead_bytes_ == 0 || nbytes == 0 || nbytes > ahead_bytes_ || aborted_) return false;
  if (peer < 0 || peer >= size() || !pairs_[peer]) return false;
  // The copy of two rounds ago is reused: only once its send is complete.
  const AheadOut& o = ahead_out_[round_ & 1];
  return o.peer < 0 || pairs_[o.peer]->send_done(o.send);
}

void HostTransport::send_ahead(int peer, const void* data, size_t nbytes,
                               const transport::MessageMeta& meta) {
  PTC_ENFORCE(published_ && ahead_room(peer, nbytes), "a first step sent ahead of ", nbytes,
              " bytes outside a published round");
  AheadOut& o = ahead_out_[round_ & 1];
  if (o.room < nbytes) {
    const size_t room = (nbytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, room);
    if (!p) PTC_THROW(kInternal, "out of memory for a first step sent ahead");
    o.data.reset(static_cast<char*>(p));
    o.room = room;
  }
  // A copy: the caller's buffer may be gone before the peer reads it, when
  // the round decides otherwise.
  std::memcpy(o.data.get(), data, nbytes);
  Pair& p = pair(peer);
  add_active(peer);
  p.post_ahead(o.data.get(), nbytes, meta, round_);
  o.peer = peer;
  o.send = p.last_send();
  progress_all();
}

const char* HostTransport::take_ahead(int peer, size_t nbytes, const transport::MessageMeta& meta) {
  Pair& p = pair(peer);
  add_active(peer);
  struct Awaiting {
    Pair& p;
    explicit Awaiting(Pair& x) : p(x) { p.await_ahead(true); }
    ~Awaiting() { p.await_ahead(false); }
  } awaiting(p);
  wait_data([&] {
    if (p.ahead_ready(round_)) return true;
    // The frame comes before anything else of this collective from the peer.
    transport::MessageMeta m;
    if (p.data_waiting(&m)) {
      PTC_THROW(kMismatch, "ranks disagree during ", context_, ": ", describe_peer(peer), " sent ",
                wire::describe_meta(m, 0),
                " where its first message of this collective, sent ahead, was due");
    }
    p.check_alive(context_);  // a peer gone before it all came
    return false;
  });
  size_t got = 0;
  transport::MessageMeta m;
  const char* data = p.ahead(round_, &got, &m);
  if (!(m == meta) || got != nbytes) {
    PTC_THROW(kMismatch, "ranks disagree during ", context_, ": ", describe_peer(peer),
              " sent ahead ", wire::describe_meta(m, got), " but this rank expected ",
              wire::describe_meta(meta, nbytes),
              ". Every rank must call the same collectives in the same order with the same "
              "dtype, shape, element count, op and root");
  }
  return data;
}

}  // namespace pytfcomm::host
