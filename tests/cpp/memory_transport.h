// A Transport whose ranks are threads of this process: no sockets, no free
// ports, no shared-memory segments. Messages between two ranks are matched
// in posting order per direction and checked like the real transport does
// (wire::check_frame: size, metadata, the message cap), so algorithms can be
// tested on any rank count and size, and their mismatches and deadlines too.
//
// A send completes only once its receiver has copied it (what a large
// shared-memory send by reference does), unless it is at most
// `buffered_bytes`, then it is copied at once (what a socket buffer does):
// an algorithm that needs buffering it cannot count on deadlocks here.
// A rank that gives up (abort()) or goes away (destroyed) fails its peers'
// waits with the class the real transport gives them.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/transport.h"
#include "transport/wire.h"

namespace pytfcomm::testing_util {

struct MemoryOptions {
  size_t buffered_bytes = 0;        // sends up to this size complete at once
  uint64_t max_message = 1u << 30;  // PYTFCOMM_MAX_MESSAGE's role
  size_t round_bytes = 64 << 10;    // round_capacity()
};

class MemoryWorld;

class MemoryTransport : public transport::Transport {
 public:
  MemoryTransport(std::shared_ptr<MemoryWorld> world, int rank);
  ~MemoryTransport() override;  // the peers see this rank gone

  // transport::DataPlane
  int rank() const override { return rank_; }
  int size() const override;
  transport::Handle post_send(int peer, const void* data, size_t nbytes,
                              const transport::MessageMeta& meta) override;
  transport::Handle post_recv(int peer, void* data, size_t nbytes,
                              const transport::MessageMeta& meta) override;
  void wait(transport::Handle h) override;
  bool test(transport::Handle h) override;
  void wait_all() override;

  // transport::RoundChannel
  size_t round_capacity() const override;
  void round_arm(uint64_t round) override;
  char* round_outbox() override;
  void round_publish(size_t bytes) override;
  bool round_started() override;
  bool round_complete() override;
  const char* round_record(int rank, size_t* bytes) override;
  void wait_for(const std::function<bool()>& pred, TimePoint wake_by) override;
  void wake() noexcept override;

  // transport::Liveness (no heartbeats: a rank that goes away says so)
  void set_deadline(TimePoint deadline) override;
  void set_context(const std::string& what) override { context_ = what; }
  std::string describe_peer(int peer) const override;
  void keep_alive() override;
  void set_status_observer(transport::StatusObserver* observer) override { observer_ = observer; }
  bool send_status(int peer, const transport::MessageMeta& meta, uint32_t flags) noexcept override;
  std::vector<int> pending_peers() const override;
  void abort(const std::string& reason, ErrorKind why) noexcept override;

 private:
  transport::Handle post(bool recv, int peer, char* data, size_t nbytes,
                         const transport::MessageMeta& meta);
  // Blocks until done() holds or wake_by passes; throws what a wait throws.
  void wait_until(const std::function<bool()>& done, TimePoint wake_by);
  // With the world's lock: throws this rank's failure, a peer's last words,
  // or the deadline's timeout (taking back this rank's buffers first);
  // delivers status frames.
  void check_locked(std::unique_lock<std::mutex>& lock);
  void throw_failure_locked(std::unique_lock<std::mutex>& lock);
  void check_open() const;
  // With the lock: hands the status frames that came to the observer.
  void deliver_statuses(std::unique_lock<std::mutex>& lock);

  std::shared_ptr<MemoryWorld> world_;
  int rank_;
  TimePoint deadline_ = TimePoint::max();
  TimePoint set_at_{};  // when the deadline was set, for messages
  std::string context_ = "a collective";
  transport::StatusObserver* observer_ = nullptr;
  uint64_t round_ = 0;
  bool published_ = false;
};

// The ranks of one in-memory job: make one, then a MemoryTransport per rank.
class MemoryWorld {
 public:
  explicit MemoryWorld(int size, MemoryOptions options = {});
  int size() const { return size_; }
  const MemoryOptions& options() const { return options_; }

 private:
  friend class MemoryTransport;
  struct Op {
    bool recv = false;
    int peer = 0;
    char* data = nullptr;
    size_t nbytes = 0;
    wire::FrameHeader header{};
    std::vector<char> copy;  // a buffered send's bytes
    bool done = false;
  };
  struct Channel {  // one direction between two ranks
    std::deque<Op*> sends, recvs;
    bool broken = false;  // a mismatch: nothing more is matched
  };
  struct Status {
    int from;
    transport::MessageMeta meta;
    uint32_t flags;
  };
  struct Rank {
    std::deque<Op> ops;   // every op posted, its index is its handle
    std::string failure;  // set: every wait throws it (a mismatch seen here)
    ErrorKind failure_kind = ErrorKind::kInternal;
    std::string last_words;  // set once it aborted
    ErrorKind abort_kind = ErrorKind::kPeerLost;
    bool aborted = false, gone = false, woken = false;
    std::vector<Status> statuses;  // status frames for it, not yet seen
    std::vector<char> records[2];  // round records by parity
    size_t record_bytes[2] = {0, 0};
    uint64_t published = 0;
  };
  Channel& channel(int from, int to) { return channels_[static_cast<size_t>(from * size_ + to)]; }
  // Matches what can be matched between `from` and `to`.
  void match(int from, int to);
  // A rank aborted or left: what it handed over stays deliverable, its own
  // buffers (sends not taken yet, receives) are no peer's to touch anymore.
  void take_back(int rank);
  void changed() {
    ++generation_;
    cv_.notify_all();
  }

  const int size_;
  const MemoryOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;
  std::vector<Channel> channels_;
  std::vector<Rank> ranks_;
};

// Runs fn(transport) on n ranks as threads over one MemoryWorld. A rank whose
// fn throws aborts its transport with that error, as the engine does, so that
// its peers fail too. Returns what each rank threw ("" for nothing); kinds[r]
// gets the ErrorKind a rank's pytfcomm::Error had (kInternal otherwise).
std::vector<std::string> run_in_memory(int n, const std::function<void(transport::Transport&)>& fn,
                                       MemoryOptions options = {},
                                       std::vector<ErrorKind>* kinds = nullptr);

}  // namespace pytfcomm::testing_util
