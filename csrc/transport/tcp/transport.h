// The point-to-point transport: one Pair per peer, each over a TCP socket
// or, for ranks of the same host, a shared-memory stream. Waiting first
// polls briefly (cheap when this rank has a core to itself), then blocks:
// in epoll_wait when only sockets are pending, on this rank's futex doorbell
// when only shared memory is, alternating short waits on both otherwise. So
// oversubscribed ranks give their core to the peer they wait for, and an
// idle rank uses no CPU. Every pair's socket stays in the epoll set: a peer
// that dies closes it, which is how a crash is noticed on any stream kind.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/shm/connect.h"
#include "transport/tcp/bootstrap.h"
#include "transport/tcp/pair.h"
#include "transport/transport.h"

namespace pytfcomm::tcp {

class PairTransport : public transport::Transport {
 public:
  // Takes the connections made by bootstrap() and the shared-memory streams
  // made by shm::connect_local_peers() (peers without one use their socket).
  // spin_us: how long to poll before blocking; yield_cpu: give the core away
  // between polls (when ranks outnumber cores, the peer we wait for may need
  // this very core).
  PairTransport(int rank, BootstrapResult boot, shm::LocalLinks shm, int64_t spin_us,
                bool yield_cpu);
  ~PairTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(pairs_.size()); }

  transport::Handle post_send(int peer, const void* data, size_t nbytes,
                              const transport::MessageMeta& meta) override;
  transport::Handle post_recv(int peer, void* data, size_t nbytes,
                              const transport::MessageMeta& meta) override;
  void wait(transport::Handle h) override;
  bool test(transport::Handle h) override;
  void wait_all() override;
  void set_deadline(TimePoint deadline) override;
  void set_context(const std::string& what) override { context_ = what; }
  void abort(const std::string& reason, ErrorKind why) noexcept override;
  std::string describe_peer(int peer) const override;
  void set_status_observer(transport::StatusObserver* observer) override;
  bool send_status(int peer, const transport::MessageMeta& meta, uint32_t flags) noexcept override;
  std::vector<int> pending_peers() const override;
  size_t oneshot_capacity() const override { return oneshot_capacity_; }
  std::vector<const void*> oneshot_exchange(const void* data, size_t nbytes,
                                            const transport::MessageMeta& meta) override;

  // The one-shot capacity this rank could offer: the smallest one-shot area
  // of all segments when every peer is reached through shared memory, else
  // 0. Ranks must agree before using it (set_oneshot_capacity).
  size_t local_oneshot_capacity() const;
  void set_oneshot_capacity(size_t bytes);

  const std::vector<PeerInfo>& peers() const { return peers_; }
  // Number of peers reached through shared memory.
  int shm_peers() const { return shm_peers_; }

 private:
  bool done(transport::Handle h) const;
  Pair& pair(int peer);
  bool progress_all();
  void check_deadline();
  void handle_events(int timeout_ms);
  void block_once();
  template <typename Pred>
  void wait_until(Pred pred);
  bool oneshot_ready(uint64_t seq);
  // While waiting in an exchange: whether every peer has published it now.
  bool oneshot_arrived();

  // A rank's one-shot area as mapped here.
  struct OneShotArea {
    std::shared_ptr<shm::Mapping> segment;  // keeps the mapping alive
    shm::OneShotCtl* ctl = nullptr;
    char* buffers = nullptr;  // two of `bytes` each
    size_t bytes = 0;
  };

  int rank_;
  std::vector<std::unique_ptr<Pair>> pairs_;  // null for self
  std::vector<PeerInfo> peers_;
  std::vector<int> active_;  // peers with posted operations
  std::shared_ptr<shm::Mapping> own_segment_;
  shm::Doorbell bell_;  // this rank's, valid when shm_peers_ > 0
  int shm_peers_ = 0;
  int epoll_fd_ = -1;
  int64_t spin_us_;
  bool yield_cpu_;
  TimePoint deadline_ = TimePoint::max();
  double timeout_s_ = 0;  // what set_deadline() asked for, for messages
  double extra_s_ = 0;    // how much the stall verdict added to it
  std::string context_ = "a collective";
  bool aborted_ = false;
  transport::StatusObserver* observer_ = nullptr;
  std::vector<OneShotArea> oneshot_;  // per rank; empty unless all peers share memory
  size_t oneshot_capacity_ = 0;
  uint64_t oneshot_seq_ = 0;       // exchanges this rank has published
  std::vector<int> oneshot_wait_;  // peers that have not published the current one
};

// The name the TCP-only transport had; kept for existing callers.
using TcpTransport = PairTransport;

}  // namespace pytfcomm::tcp
