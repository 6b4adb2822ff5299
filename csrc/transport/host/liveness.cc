// Liveness of the HostTransport (docs/reliability.md): a crashed peer closes
// its sockets, which every wait notices at once; a stopped or hung one
// (SIGSTOP, a wedged kernel call, a host that fell off the network) keeps
// them open and says nothing. So every rank sends each peer a BEAT frame
// every interval, from its waits or, while no collective waits, from the
// engine's background thread (keep_alive), and a peer from which nothing at
// all has arrived for `silence` seconds is lost: the wait that notices it
// throws kPeerLost naming it, long before any collective deadline.
#include "common/error.h"
#include "transport/host/transport.h"

namespace pytfcomm::host {
namespace {

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

}  // namespace

void HostTransport::set_liveness(double interval_s, double silence_s) {
  beat_s_ = silence_s > 0 ? interval_s : 0;
  silence_s_ = silence_s > 0 ? silence_s : 0;
  next_beat_ = beat_s_ > 0 ? Clock::now() : TimePoint::max();
}

void HostTransport::liveness_tick(TimePoint now) {
  if (beat_s_ <= 0 || now < next_beat_ || aborted_) return;
  next_beat_ = now + seconds(beat_s_);
  for (int r = 0; r < size(); ++r) {
    if (r == rank_ || !pairs_[r]) continue;
    bool was_idle = pairs_[r]->idle();
    if (pairs_[r]->send_beat() && was_idle) active_.push_back(r);
  }
  progress_all();
  // Take in what idle peers sent (their beats among it): epoll reports a
  // socket once per arrival, and shared memory not at all.
  handle_events(0);
  for (auto& p : pairs_) {
    if (p && p->idle()) p->check_idle(context_);
  }
  check_silence(now);
}

void HostTransport::check_silence(TimePoint now) {
  for (int r = 0; r < size(); ++r) {
    if (r == rank_ || !pairs_[r]) continue;
    const double quiet = std::chrono::duration<double>(now - pairs_[r]->last_heard()).count();
    if (quiet <= silence_s_) continue;
    pairs_[r]->mark_gone();  // it would not read our last words
    auto round = [](double x) { return static_cast<int64_t>(x * 10 + 0.5) / 10.0; };
    PTC_THROW(kPeerLost, describe_peer(r), " has sent nothing, not even a heartbeat, for ",
              round(quiet), " s while this rank was in ", context_,
              ": it is stopped (SIGSTOP, a debugger), hung, or its host is unreachable. "
              "PYTFCOMM_PEER_TIMEOUT (",
              silence_s_, " s) sets how long a silent peer is waited for");
  }
}

void HostTransport::keep_alive() {
  if (aborted_) return;
  liveness_tick(Clock::now());
  progress_all();
}

}  // namespace pytfcomm::host
