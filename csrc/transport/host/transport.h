// The transport of a job's ranks on hosts: one Pair per peer, each over the
// byte stream transport/connect.cc made for it (TCP sockets, or shared memory
// for ranks of the same host). Waiting first polls briefly (cheap when this
// rank has a core to itself), then blocks: in epoll_wait when only sockets are
// pending, on this rank's futex doorbell when only shared memory is,
// alternating short waits on both otherwise. So oversubscribed ranks give
// their core to the peer they wait for, and an idle rank uses no CPU. Every
// pair's socket stays in the epoll set: a peer that dies closes it, which is
// how a crash is noticed on any stream kind.
#pragma once

#include <atomic>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "transport/doorbell.h"
#include "transport/host/bundle.h"
#include "transport/host/pair.h"
#include "transport/host/wait_policy.h"
#include "transport/net/peer.h"
#include "transport/round_areas.h"
#include "transport/transport.h"

namespace pytfcomm::host {

// How this rank reaches one peer.
struct PeerLink {
  std::unique_ptr<transport::ByteStream> stream;  // null for this rank
  std::string how;  // for its name ("4 TCP streams"; "" says nothing more)
};

class HostTransport : public transport::Transport {
 public:
  // links[r]: the stream to rank r. bell: this rank's doorbell (shared
  // memory), needed when any stream is polled; areas: where rounds may go
  // when every peer shares memory with this rank (null or of capacity 0: none).
  HostTransport(int rank, std::vector<net::PeerInfo> peers, std::vector<PeerLink> links,
                std::unique_ptr<transport::Doorbell> bell,
                std::unique_ptr<transport::RoundAreas> areas, WaitPolicy wait);
  ~HostTransport() override;

  // transport::DataPlane (transport.cc, waiting.cc).
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(pairs_.size()); }
  transport::Handle post_send(int peer, const void* data, size_t nbytes,
                              const transport::MessageMeta& meta) override;
  transport::Handle post_recv(int peer, void* data, size_t nbytes,
                              const transport::MessageMeta& meta) override;
  void wait(transport::Handle h) override;
  bool test(transport::Handle h) override;
  void wait_all() override;

  // transport::RoundChannel (rounds.cc; the waits in waiting.cc): in the
  // one-shot areas when every peer shares memory with this rank and the
  // ranks agreed on an area size, else as frames over the pairs.
  size_t round_capacity() const override;
  void round_arm(uint64_t round) override;
  char* round_outbox() override;
  void round_publish(size_t bytes) override;
  bool round_started() override;
  bool round_complete() override;
  const char* round_record(int rank, size_t* bytes) override;
  void wait_for(const std::function<bool()>& pred, TimePoint wake_by) override;
  void wake() noexcept override;
  // First steps sent ahead (ahead.cc).
  bool ahead_room(int peer, size_t nbytes) const override;
  void send_ahead(int peer, const void* data, size_t nbytes,
                  const transport::MessageMeta& meta) override;
  const char* take_ahead(int peer, size_t nbytes, const transport::MessageMeta& meta) override;

  // transport::Liveness (liveness.cc; deadlines in waiting.cc, the rest in
  // transport.cc).
  void set_deadline(TimePoint deadline) override;
  void set_context(const std::string& what) override { context_ = what; }
  std::string describe_peer(int peer) const override;
  void set_liveness(double interval_s, double silence_s) override;
  void keep_alive() override;
  void set_status_observer(transport::StatusObserver* observer) override;
  bool send_status(int peer, const transport::MessageMeta& meta, uint32_t flags) noexcept override;
  std::vector<int> pending_peers() const override;
  void abort(const std::string& reason, ErrorKind why) noexcept override;
  void flush(TimePoint until) noexcept override;

  // Setup: the area size this rank could offer to rounds (the smallest
  // one-shot area of all segments when every peer is reached through shared
  // memory, else 0). Ranks agree on one (the minimum) and call
  // configure_rounds(): rounds then go through the areas when it is at
  // least `min_area` bytes, else as frames of up to `frame_bytes`.
  size_t local_area_capacity() const { return areas_ ? areas_->capacity() : 0; }
  // Before the agreement: the largest record a peer may send this rank as a
  // frame (one that finished setup may send its first record before this
  // rank has). configure_rounds() never allows more.
  void prepare_inbox(size_t bytes);
  void configure_rounds(size_t area_bytes, size_t min_area, size_t frame_bytes);
  // The most bytes a first step sent ahead may hold (agreed; 0: none), over
  // frames only: every pair takes up to this much.
  void set_ahead_limit(size_t bytes);
  size_t ahead_limit() const { return ahead_bytes_; }

  // Number of peers reached through shared memory.
  int shm_peers() const { return shm_peers_; }

 private:
  bool done(transport::Handle h) const;
  Pair& pair(int peer);
  bool progress_all();
  void check_deadline();
  void handle_events(int timeout_ms);
  void block_once(const std::function<bool()>& pred, TimePoint wake_by);
  template <typename Pred>
  void wait_until(Pred pred, TimePoint wake_by = TimePoint::max());
  template <typename Pred>
  void wait_loop(Pred& pred, TimePoint wake_by);
  // wait_until() for callers in other files.
  void wait_data(const std::function<bool()>& pred);
  // After a peer's last words were raised: whether what had arrived before
  // them satisfies `pred` (more progress, each throw of last words heard).
  bool done_before_last_words(const std::function<bool()>& pred);
  // Liveness: heartbeats due, idle pairs read, silent peers (throws).
  void liveness_tick(TimePoint now);
  void check_silence(TimePoint now);
  // While negotiating: kPeerLost for a gone peer this rank still needs.
  void check_round_peers();
  // Whether rank r's record of the armed round is here (r != rank_).
  bool has_record(int r) const;
  // Rounds in frames (rounds.cc): step s's peers (the bundle comes from
  // step_src, goes to step_dst) and how many records it carries.
  int step_src(int s) const;
  // How far above this rank r is, mod size.
  int above(int r) const;
  // Whether rank r sends this rank frames in rounds (always over the areas).
  bool hears_from(int r) const;
  int step_dst(int s) const;
  size_t step_records(int s) const;
  void size_inboxes(size_t record_bytes);
  // Step s's bundle of the armed round is here (checked; throws if corrupt).
  bool bundle_here(int s);
  const char* bundled_record(int rank, size_t* bytes);
  // Sends the bundles of every step whose records are here.
  void send_steps();
  void add_active(int peer);

  // epoll data of the wake eventfd (peers use their rank).
  static constexpr uint32_t kWakeTag = UINT32_MAX;
  enum Sleeping { kAwake = 0, kInEpoll = 1, kOnDoorbell = 2 };
  struct AlignedFree {
    void operator()(char* p) const { std::free(p); }
  };
  using Buffer = std::unique_ptr<char, AlignedFree>;

  int rank_;
  std::vector<std::unique_ptr<Pair>> pairs_;  // null for self
  std::vector<net::PeerInfo> peers_;
  std::vector<int> active_;                    // peers with posted operations
  std::unique_ptr<transport::Doorbell> bell_;  // this rank's, set when shm_peers_ > 0
  int shm_peers_ = 0;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // eventfd in the epoll set: wake() while blocked in epoll
  WaitPolicy wait_;
  TimePoint deadline_ = TimePoint::max();
  double timeout_s_ = 0;  // what set_deadline() asked for, for messages
  double extra_s_ = 0;    // how much the stall verdict added to it
  std::string context_ = "a collective";
  bool aborted_ = false;
  transport::StatusObserver* observer_ = nullptr;
  std::atomic<bool> woken_{false};
  std::atomic<int> sleeping_{0};  // 1: in epoll_wait, 2: on the doorbell

  // Rounds: the areas (null or empty unless every peer shares memory)...
  std::unique_ptr<transport::RoundAreas> areas_;
  size_t area_bytes_ = 0;  // > 0: rounds go through the areas
  // ... or frames (records come in through each Pair's inbox).
  size_t frame_bytes_ = 0;                // the most one record may take
  int steps_ = 0;                         // ceil(log2 size)
  int sent_steps_ = 0;                    // bundles of the armed round sent
  std::vector<Buffer> bundles_out_[2];    // by round parity, one per step
  std::vector<BundleView> views_;         // per step, of the armed round
  std::vector<bool> parsed_;              // views_[s] is of the armed round
  std::vector<const char*> bundle_recs_;  // send_steps()' scratch
  std::vector<size_t> bundle_sizes_;
  uint64_t round_ = 0;
  size_t own_bytes_ = 0;
  bool published_ = false;
  bool negotiating_ = false;  // inside wait_for()

  // First steps sent ahead: the agreed limit and, by round parity, the copy
  // this rank sent (free again once its send completed).
  size_t ahead_bytes_ = 0;
  struct AheadOut {
    Buffer data;
    size_t room = 0;
    int peer = -1;  // -1: nothing in flight
    uint64_t send = 0;
  };
  AheadOut ahead_out_[2];

  // Liveness.
  double beat_s_ = 0, silence_s_ = 0;
  TimePoint next_beat_ = TimePoint::max();
};

}  // namespace pytfcomm::host
