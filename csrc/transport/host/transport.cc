#include "transport/host/transport.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "common/error.h"
#include "common/param.h"
#include "transport/wire_check.h"

namespace pytfcomm::host {
namespace {

// How long abort() may spend getting its reason past the frames already
// queued to TCP peers. A peer that reads takes it in milliseconds; one that
// does not (blocked elsewhere with full buffers) learns why from another rank.
constexpr double kAbortFlushSeconds = 1.0;

// Handle layout: peer (15 bits) | direction (1 bit) | per-direction sequence (48 bits).
constexpr int kSeqBits = 48;
constexpr uint64_t kSeqMask = (uint64_t{1} << kSeqBits) - 1;

transport::Handle make_handle(int peer, bool recv, uint64_t seq) {
  return (static_cast<uint64_t>(peer) << (kSeqBits + 1)) |
         (static_cast<uint64_t>(recv) << kSeqBits) | (seq & kSeqMask);
}

}  // namespace

HostTransport::HostTransport(int rank, std::vector<net::PeerInfo> peers,
                             std::vector<PeerLink> links, std::unique_ptr<transport::Doorbell> bell,
                             std::unique_ptr<transport::RoundAreas> areas, WaitPolicy wait)
    : rank_(rank),
      peers_(std::move(peers)),
      bell_(std::move(bell)),
      wait_(wait),
      areas_(std::move(areas)) {
  int n = static_cast<int>(peers_.size());
  PTC_ENFORCE(n < (1 << 15), "too many ranks for the handle layout: ", n);
  PTC_ENFORCE(static_cast<int>(links.size()) == n, "one link per rank");
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) PTC_THROW(kInternal, "epoll_create1 failed: ", std::strerror(errno));
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) PTC_THROW(kInternal, "eventfd failed: ", std::strerror(errno));
  epoll_event wev{};
  wev.events = EPOLLIN;
  wev.data.u32 = kWakeTag;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &wev) != 0) {
    PTC_THROW(kInternal, "epoll_ctl failed: ", std::strerror(errno));
  }
  pairs_.resize(n);
  uint64_t max_message = static_cast<uint64_t>(params().max_message_bytes);
  for (int r = 0; r < n; ++r) {
    if (r == rank_) continue;
    PeerLink& link = links[static_cast<size_t>(r)];
    PTC_ENFORCE(link.stream != nullptr, "no connection to rank ", r, " after setup");
    std::string name = describe_peer(r);
    epoll_event ev{};
    if (link.stream->features().polled) {
      name.insert(name.size() - 1, ", shared memory");
      ++shm_peers_;
      ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;  // liveness only
    } else {
      if (!link.how.empty()) name.insert(name.size() - 1, ", " + link.how);
      ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    }
    ev.data.u32 = static_cast<uint32_t>(r);
    for (int fd : link.stream->event_fds()) {
      if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
        PTC_THROW(kInternal, "epoll_ctl failed: ", std::strerror(errno));
      }
    }
    pairs_[r] = std::make_unique<Pair>(r, std::move(link.stream), name, max_message);
  }
  PTC_ENFORCE(shm_peers_ == 0 || bell_ != nullptr,
              "shared-memory streams without this rank's doorbell");
}

HostTransport::~HostTransport() {
  pairs_.clear();  // streams close (and wake sleeping peers) before the segment goes
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

std::string HostTransport::describe_peer(int peer) const {
  if (peer < 0 || peer >= static_cast<int>(peers_.size())) return str_cat("rank ", peer);
  const net::PeerInfo& p = peers_[peer];
  bool shm = peer < static_cast<int>(pairs_.size()) && pairs_[peer] && pairs_[peer]->polled();
  // The last rank listens nowhere (port 0): its host alone names it.
  std::string port = p.port ? str_cat(":", p.port) : "";
  return str_cat("rank ", peer, " (", p.host, port, shm ? ", shared memory" : "", ")");
}

Pair& HostTransport::pair(int peer) {
  PTC_ENFORCE(peer >= 0 && peer < size() && peer != rank_, "bad peer ", peer);
  if (aborted_ || !pairs_[peer]) {
    PTC_THROW(kClosed,
              "the transport was shut down after an earlier error; create a new "
              "communicator");
  }
  return *pairs_[peer];
}

transport::Handle HostTransport::post_send(int peer, const void* data, size_t nbytes,
                                           const transport::MessageMeta& meta) {
  Pair& p = pair(peer);
  add_active(peer);
  return make_handle(peer, false, p.post_send(data, nbytes, meta));
}

transport::Handle HostTransport::post_recv(int peer, void* data, size_t nbytes,
                                           const transport::MessageMeta& meta) {
  Pair& p = pair(peer);
  add_active(peer);
  return make_handle(peer, true, p.post_recv(data, nbytes, meta));
}

void HostTransport::add_active(int peer) {
  if (pairs_[peer]->idle()) active_.push_back(peer);
}

bool HostTransport::done(transport::Handle h) const {
  int peer = static_cast<int>(h >> (kSeqBits + 1));
  bool recv = (h >> kSeqBits) & 1;
  uint64_t seq = h & kSeqMask;
  const Pair& p = *pairs_[peer];
  return recv ? p.recv_done(seq) : p.send_done(seq);
}

bool HostTransport::progress_all() {
  bool moved = false;
  for (size_t i = 0; i < active_.size();) {
    Pair& p = *pairs_[active_[i]];
    moved |= p.progress(context_);
    if (p.idle()) {
      active_[i] = active_.back();
      active_.pop_back();
    } else {
      ++i;
    }
  }
  return moved;
}

void HostTransport::set_status_observer(transport::StatusObserver* observer) {
  observer_ = observer;
  for (auto& p : pairs_) {
    if (p) p->set_status_observer(observer);
  }
}

bool HostTransport::send_status(int peer, const transport::MessageMeta& meta,
                                uint32_t flags) noexcept {
  if (aborted_ || peer < 0 || peer >= size() || !pairs_[peer]) return false;
  Pair& p = *pairs_[peer];
  bool was_idle = p.idle();
  if (!p.send_status(meta, flags)) return false;
  if (was_idle) active_.push_back(peer);
  return true;
}

std::vector<int> HostTransport::pending_peers() const {
  std::vector<int> out = active_;
  // Waiting in a round: the peers whose record has not come (over frames,
  // they may be farther than the peers this rank hears from).
  if (published_ && (area_bytes_ > 0 || steps_ > 0)) {
    for (int r = 0; r < size(); ++r) {
      if (r != rank_ && !has_record(r) && std::find(out.begin(), out.end(), r) == out.end()) {
        out.push_back(r);
      }
    }
  }
  return out;
}

void HostTransport::flush(TimePoint until) noexcept {
  if (aborted_) return;
  // Queued frames first (records a round did not wait for): small, so a peer
  // that does not take them within a second is not going to.
  const TimePoint frames_by = std::min(until, deadline_after(1.0));
  try {
    for (;;) {
      bool queued = false;
      for (auto& p : pairs_) queued |= p && p->wants_write();
      if (!queued) break;
      if (Clock::now() >= frames_by) return;
      if (!progress_all()) handle_events(1);
    }
  } catch (...) {
    return;  // a peer already gone: nothing more to hand over
  }
  // Then wait until the peers' kernels hold every byte written (Pair::
  // drain_for_close): a broadcast's root returns once its kernel took the
  // data, and closing then could reset the connection under the tail its
  // peer still receives. Normally a few ms; a peer that stops reading is
  // given up on after kCloseStallSeconds without progress.
  constexpr double kCloseStallSeconds = 2.0;
  std::vector<Pair*> left;
  for (auto& p : pairs_) {
    if (p) left.push_back(p.get());
  }
  TimePoint stall = deadline_after(kCloseStallSeconds);
  size_t least = SIZE_MAX;
  std::vector<pollfd> fds;
  while (!left.empty()) {
    size_t unacked = 0;
    left.erase(std::remove_if(left.begin(), left.end(),
                              [&](Pair* p) { return p->drain_for_close(&unacked); }),
               left.end());
    if (left.empty() || Clock::now() >= until) break;
    if (unacked < least) {  // the peers still take our bytes in
      least = unacked;
      stall = deadline_after(kCloseStallSeconds);
    } else if (Clock::now() >= stall) {
      break;
    }
    fds.clear();
    for (Pair* p : left) fds.push_back({p->fd(), POLLIN, 0});
    ::poll(fds.data(), fds.size(), 1);
  }
}

void HostTransport::abort(const std::string& reason, ErrorKind why) noexcept {
  if (aborted_) return;
  aborted_ = true;
  active_.clear();
  try {
    // Shared-memory peers get the reason in their note at once; TCP peers
    // after the frame being written to them, all flushed together within
    // a short deadline (docs/reliability.md). The flags carry the error
    // kind, so that every rank raises the class of the root cause.
    uint32_t flags = why == ErrorKind::kTimeout ? uint32_t{wire::kAbortTimeout} : 0u;
    flags |= (static_cast<uint32_t>(why) + 1) << wire::kAbortKindShift;
    std::string msg = str_cat("rank ", rank_, " gave up: ", reason);
    std::vector<Pair*> flushing;
    for (auto& p : pairs_) {
      if (p && p->begin_abort(msg, flags)) flushing.push_back(p.get());
    }
    TimePoint end = deadline_after(kAbortFlushSeconds);
    std::vector<pollfd> fds;
    while (!flushing.empty()) {
      flushing.erase(std::remove_if(flushing.begin(), flushing.end(),
                                    [](Pair* p) { return !p->flush_abort(); }),
                     flushing.end());
      if (flushing.empty() || Clock::now() >= end) break;
      fds.clear();
      for (Pair* p : flushing) {
        fds.push_back({p->fd(), static_cast<short>(POLLIN | (p->wants_write() ? POLLOUT : 0)), 0});
      }
      ::poll(fds.data(), fds.size(), 2);
    }
  } catch (...) {
    // Out of memory: close without last words.
  }
  for (auto& p : pairs_) {
    if (p) p->close();
  }
}

}  // namespace pytfcomm::host
