// The TCP transport: one connection per pair of ranks, non-blocking sockets
// and an epoll set. Waiting first polls briefly (cheap when this rank has a
// core to itself) and then blocks in epoll_wait, so oversubscribed ranks
// give their core to the peer they wait for.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/tcp/bootstrap.h"
#include "transport/tcp/pair.h"
#include "transport/transport.h"

namespace pytfcomm::tcp {

class TcpTransport : public transport::Transport {
 public:
  // Takes the connections made by bootstrap(). spin_us: how long to poll
  // before blocking; yield_cpu: give the core away between polls (when ranks
  // outnumber cores, the peer we wait for may need this very core).
  TcpTransport(int rank, BootstrapResult boot, int64_t spin_us, bool yield_cpu);
  ~TcpTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(pairs_.size()); }

  transport::Handle post_send(int peer, const void* data, size_t nbytes,
                              const transport::MessageMeta& meta) override;
  transport::Handle post_recv(int peer, void* data, size_t nbytes,
                              const transport::MessageMeta& meta) override;
  void wait(transport::Handle h) override;
  bool test(transport::Handle h) override;
  void wait_all() override;
  void set_deadline(TimePoint deadline) override { deadline_ = deadline; }
  void set_context(const std::string& what) override { context_ = what; }
  void abort(const std::string& reason) noexcept override;
  std::string describe_peer(int peer) const override;

  const std::vector<PeerInfo>& peers() const { return peers_; }

 private:
  bool done(transport::Handle h) const;
  Pair& pair(int peer);
  bool progress_all();
  void block_once();
  template <typename Pred>
  void wait_until(Pred pred);

  int rank_;
  std::vector<std::unique_ptr<Pair>> pairs_;  // null for self
  std::vector<PeerInfo> peers_;
  std::vector<int> active_;  // peers with posted operations
  int epoll_fd_ = -1;
  int64_t spin_us_;
  bool yield_cpu_;
  TimePoint deadline_ = TimePoint::max();
  std::string context_ = "a collective";
  bool aborted_ = false;
};

}  // namespace pytfcomm::tcp
