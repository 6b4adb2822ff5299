// A communicator: the ranks of one job, connected, with the collectives the
// public API offers (docs/negotiation.md).
//
// Ranks do not pair up collectives by the order they call them in: every
// collective has a key (the n-th call of a thread, of a TF op, or of a
// name), and the ranks negotiate, in rounds, which keys every rank has asked
// for; those run, in one order on every rank. So threads, TF's inter-op
// threads and control flow may issue collectives in any order. Before any
// data moves every rank has seen every rank's description of a collective:
// a disagreement (kind, dtype, shape, op, root, algorithm) is a MismatchError
// on every rank and the communicator stays usable. Only a lost, silent or
// hung peer, a deadline in the middle of a transfer, or an interrupt closes
// it for good (peers are told why) and every later call says so.
//
// Any thread may call a collective; whichever thread is waiting drives the
// negotiation and runs what was decided (its own collective or another's),
// and a background thread drives for asynchronous requests (the TF ops) and
// keeps the peers' liveness checked while nobody waits.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "algorithms/collective.h"
#include "common/algorithm.h"
#include "common/dtype.h"
#include "engine/negotiator.h"
#include "engine/request.h"
#include "observe/stall_inspector.h"
#include "transport/transport.h"

namespace pytfcomm {

class Fusion;  // engine/fusion.h
class Timeline;

struct CommOptions {
  int rank = 0;
  int size = 1;
  std::string root_host = "127.0.0.1";  // rank 0's rendezvous address
  int root_port = 0;
  std::string bind_host;          // "" = the local address that routes to rank 0
  std::string host_id;            // ranks with equal host_id are on one machine
  double connect_timeout_s = -1;  // <= 0: PYTFCOMM_CONNECT_TIMEOUT
  double timeout_s = -1;          // <= 0: PYTFCOMM_TIMEOUT
  std::string secret;             // job secret for the handshake; "" = none
  std::string transport;          // "auto" | "tcp" | "shm"; "": PYTFCOMM_TRANSPORT
  double stall_warning_s = -1;    // < 0: PYTFCOMM_STALL_WARNING; 0: no stall warnings
};

// How a collective call is matched across ranks: by default the n-th
// unnamed call of the calling thread; with a name, the n-th call under that
// name (any thread).
struct CallKey {
  std::string name;     // "" = the calling thread's stream
  uint64_t stream = 0;  // a reserved stream (join()); 0: from `name`
};

class Communicator {
 public:
  explicit Communicator(const CommOptions& opts);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_.me; }
  int local_size() const { return local_.size(); }
  int num_hosts() const { return num_hosts_; }
  // The port rank 0 listens on (useful when it was asked for port 0).
  int root_port() const { return root_port_; }
  // The deadline a call with timeout_s <= 0 gets (init's timeout, else PYTFCOMM_TIMEOUT).
  double default_timeout_s() const { return timeout_s_; }
  std::string host_of(int rank) const;
  // Topology, for backends that build their own groups (gpu/clique.cc).
  const algorithms::Group& local_group() const { return local_; }
  const algorithms::Group& cross_group() const { return cross_; }  // empty unless uniform
  bool uniform_hosts() const { return uniform_hosts_; }

  // Synchronous collectives: return when this rank's part is done. timeout_s
  // <= 0 means the communicator's default. shape_tag: a digest of the
  // caller's array shape, compared across ranks (0: not given). `key`: how
  // the call is matched (null: the calling thread's next call).
  void allreduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                 Algorithm algorithm, double timeout_s, uint32_t shape_tag = 0,
                 const CallKey* key = nullptr);
  void broadcast(void* buf, size_t count, DType dtype, int root, double timeout_s,
                 uint32_t shape_tag = 0, const CallKey* key = nullptr);
  void allgather(const void* in, void* out, size_t count, DType dtype, double timeout_s,
                 uint32_t shape_tag = 0, const CallKey* key = nullptr);
  // count: elements of `in`; `out` gets count / size elements.
  void reduce_scatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                      double timeout_s, uint32_t shape_tag = 0, const CallKey* key = nullptr);
  void barrier(double timeout_s, const CallKey* key = nullptr);
  // Horovod's join: this rank has no more collectives of its own. Until
  // every rank has joined, it takes part in the others' collectives with
  // nothing of its own (sums and means: zeros; min, max, prod: the identity;
  // all-gathers and all-to-alls: no rows), then returns the rank that joined
  // last (ties: the highest). Collectives that cannot run so (equal-shape
  // all-gather, a broadcast whose root joined, GPU collectives) fail on the
  // ranks that asked, with kMismatch. Waits at most timeout_s for the rest.
  int join(double timeout_s);

  // Collectives whose sizes differ per rank. `alloc(total)` is called once,
  // on whichever thread drives the engine, when the result's element count
  // is known; it returns where the result goes (null, or a throw: nowhere;
  // this rank still takes part so that the others finish, and the call
  // returns normally: the caller reports why it had no buffer).
  // shape_tag: a digest of the dtype-independent shape of one row, which
  // must agree on every rank (as must the dtype).
  //
  // allgatherv: every rank contributes `count` elements (its own count);
  // the result is all of them in rank order, counts[i] from rank i (size()
  // entries, filled). The counts travel in the negotiation: no message of
  // their own, and equal counts run the equal all-gather.
  void allgatherv(const void* in, size_t count, DType dtype,
                  const std::function<void*(uint64_t)>& alloc, uint64_t* counts, double timeout_s,
                  uint32_t shape_tag = 0, const CallKey* key = nullptr);
  // alltoallv: send_counts[i] elements of `in` (blocks in rank order) go
  // to rank i; the result is what every rank sent this one, in rank order,
  // recv_counts[i] (filled) from rank i. Pairwise exchange, after one
  // 8-byte message to and from every peer with the counts.
  void alltoallv(const void* in, const uint64_t* send_counts, DType dtype,
                 const std::function<void*(uint64_t)>& alloc, uint64_t* recv_counts,
                 double timeout_s, uint32_t shape_tag = 0, const CallKey* key = nullptr);

  // A request's `external` (engine/external.h) lets another backend move
  // the data of a negotiated collective: make_request() with null buffers,
  // set it, and run_requests().
  // Asynchronous: requests built by make_request(), submitted together
  // (consecutive calls of `stream`, a stream_id(); the engine numbers them).
  // The engine owns them from here on, calls each one's on_done (on the
  // engine's thread) and deletes it. Throws, and takes none, when the
  // communicator cannot take them (closed, or in a forked child).
  std::unique_ptr<Request> make_request(algorithms::CollectiveKind kind, const void* in, void* out,
                                        size_t count, DType dtype, ReduceOp op, Algorithm algorithm,
                                        int root, double timeout_s, uint32_t shape_tag);
  // may_drive: when no thread drives the engine, the calling thread drives
  // it for up to PYTFCOMM_ASYNC_DRIVE_US (its requests usually finish, and
  // on_done runs, before this returns), which saves the hand-off to the
  // background thread and back; never for external requests.
  void submit_async(std::vector<std::unique_ptr<Request>> reqs, uint64_t stream,
                    const std::string& label, bool may_drive = false);
  // Ctrl-C while submit_async requests (TF ops) wait, which no thread
  // that runs the user's signal handlers attends (engine/user_interrupt.h):
  // when some are pending, fail everything this communicator holds with
  // kInterrupted, tell the peers and close, as an interrupted caller does.
  // Returns whether there were any. Any thread; never blocks for long.
  bool interrupt_unattended();

  // The algorithm "auto" would pick for an all-reduce of `bytes` (kOneShot:
  // within the negotiation round, when every rank asks in the same round).
  Algorithm choose_allreduce(size_t bytes) const;
  Algorithm last_algorithm() const { return last_algorithm_; }
  // How many streams it keeps a numbering for (tests: named ones go when idle).
  size_t stream_states() const;
  // The pipeline segment algorithm `a` runs an all-reduce of `bytes` in
  // (every rank alike).
  size_t allreduce_segment(Algorithm a, size_t bytes) const;

  void close();
  bool closed() const;
  // Why an error closed it ("" when open or closed by close()).
  std::string failure() const;

  // Tensor fusion and asynchronous all-reduce on this communicator.
  Fusion& fusion() { return *fusion_; }
  // The timeline (PYTFCOMM_TIMELINE, or start_timeline), null when never
  // started; once set it stays for the communicator's life (stop_timeline
  // pauses it), so a hook that saw it may use it.
  Timeline* timeline() const { return timeline_.get(); }
  // Its file path; "" while off.
  std::string timeline_path() const;
  // At run time: start writing this rank's timeline in the file of `pattern`
  // (Timeline::path_for: "%r" or ".rank<N>"); returns the path. Throws
  // kConfig when the file cannot be written. stop_timeline() pauses it.
  std::string start_timeline(const std::string& pattern);
  void stop_timeline();

 private:
  enum class RoundState { kBetween, kInRound };

  // Calls numbered per stream; the thread using a thread stream right now.
  struct StreamState {
    uint64_t next = 0;
    std::thread::id user;
    int active = 0;
    int unattended = 0;  // submit_async's requests (TF ops') not finished
  };
  // Called with mu_ held: checks the communicator can take a request,
  // gives it its key and queues it for the driver.
  void enqueue_locked(Request* r, uint64_t stream, bool owned, StreamState* st = nullptr);
  void run_sync(algorithms::CollectiveKind kind, const void* in, void* out, size_t count,
                DType dtype, ReduceOp op, Algorithm algorithm, int root, double timeout_s,
                uint32_t shape_tag, const CallKey* key);

 public:
  // Several synchronous requests (built with make_request()) issued together
  // as consecutive calls of the caller's stream: one round can announce them
  // all and their data moves back to back. Returns when all are done; throws
  // the first one's error.
  void run_requests(Request* const* rs, size_t n, const CallKey* key = nullptr);

 private:
  void check_usable_locked() const;
  // The fields allgatherv and alltoallv share: what each rank receives is
  // sized by `alloc` once the counts are known.
  void fill_variable(Request& r, algorithms::CollectiveKind kind, const void* in, size_t count,
                     DType dtype, const std::function<void*(uint64_t)>& alloc,
                     uint64_t* recv_counts, double timeout_s, uint32_t shape_tag) const;
  // Throws kClosed in a forked child (lock-free: call it before any lock).
  void check_process() const;
  // Waits for every request, driving the engine whenever no other thread
  // does; then releases `stream` (a thread stream in use by this call, or null).
  void await(Request* const* rs, size_t n, StreamState* stream);
  // With mu_ held: gives up the driver role and wakes who may take it.
  void release_driver_locked();
  // With mu_ held, after await(): the caller of `rs` no longer uses `s`, whose
  // state goes if it is a named stream that they restarted (kNamedStreamBit:
  // all agreed, nothing else in flight) or the communicator is closed.
  void leave_stream_locked(Request* const* rs, size_t n, StreamState* s);
  // With mu_ held: forgets `stream`'s numbering (it starts again at 0) unless
  // something of it is in flight.
  void release_stream_locked(uint64_t stream);

  // The driver (driver.cc): one step of the negotiation, until done().
  void drive(const std::function<bool()>& done);
  void step(const std::function<bool()>& done);
  void take_submissions();
  void expire();
  void publish_round();
  void process_round();
  void run_decision(Decision& d);
  // This rank's part, as a joined rank, of a collective the others decided.
  void run_adopted(const Decision& d);
  // Numbers this rank's next calls on `stream` from `next`, those made and
  // not yet announced included (out_of_step.cc).
  void resync_stream(uint64_t stream, uint64_t next);
  bool fast_round();
  // Whether `r` may run within a round, and how many input bytes it adds.
  bool eager_input(const Request& r, size_t* data_bytes) const;
  bool data_complete(const Descriptor& desc, const std::vector<const char*>& data) const;
  // A failure that ends the communicator: tell peers, fail every request.
  void fail(const std::exception_ptr& error, ErrorKind kind, const std::string& what);
  void finish(Request* r, std::exception_ptr error);
  TimePoint earliest_deadline() const;

  // Data movement of one decided collective (execute.cc).
  void execute(Request& r, const Decision& d);
  void execute_eager(Request& r, const Decision& d);
  void run_algorithm(Request& r, const transport::MessageMeta& meta);
  Algorithm resolve_allreduce(Algorithm asked, size_t bytes) const;

  // The background thread (waiting.cc).
  void background_loop();

  int rank_;
  int size_;
  int root_port_ = 0;
  int num_hosts_ = 1;
  bool uniform_hosts_ = false;  // every host runs the same number of ranks
  double timeout_s_;
  uint64_t fork_generation_ = 0;
  std::vector<std::string> hosts_;
  algorithms::Group world_, local_, cross_;
  std::unique_ptr<transport::Transport> transport_;
  algorithms::Workspace workspace_;
  size_t eager_bytes_ = 0;            // largest input that may run within a round
  double drive_s_ = 0;                // how long a submitting thread may drive (submit_async)
  size_t segment_bytes_ = 0;          // the ring's pipeline segment (agreed)
  size_t oversub_segment_bytes_ = 0;  // the ring's, ranks outnumbering cores (0: not so)
  size_t halving_bytes_ = 0;          // auto's halving-doubling limit (agreed; 0: never)
  bool all_shared_memory_ = false;    // every pair of ranks shares memory (agreed)

  // Shared between threads, under mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;       // for callers: a request finished, or the driver left
  std::condition_variable bg_cv_;    // for the background thread: work, or the end
  int waiters_ = 0;                  // threads waiting on cv_
  std::vector<Request*> submitted_;  // not yet taken by the driver
  std::vector<std::unique_ptr<Request>> owned_submitted_;
  std::unordered_map<uint64_t, StreamState> streams_;
  bool driving_ = false;               // some thread drives
  std::atomic<int> sync_waiters_{0};   // synchronous callers waiting for the role
  std::atomic<int> async_pending_{0};  // asynchronous requests not finished
  std::atomic<bool> has_submitted_{false};
  std::atomic<bool> closing_{false};           // close() waits for the driver to leave
  std::atomic<bool> interrupt_{false};         // a waiting caller was interrupted
  std::atomic<bool> interrupt_signal_{false};  // ... or Ctrl-C came while TF ops waited
  bool closed_ = false;
  bool stop_ = false;    // the background thread must end
  std::string failure_;  // why the communicator was closed by an error

  // The driver's (one thread at a time, while driving_).
  Negotiator negotiator_;
  RoundState state_ = RoundState::kBetween;
  uint64_t round_ = 1;
  uint32_t exec_seq_ = 0;
  std::vector<Request*> fresh_;          // taken, not yet announced
  std::vector<CollectiveKey> withdraw_;  // announced, past their deadline
  TimePoint round_deadline_ = TimePoint::max();
  TimePoint inline_until_ = TimePoint::max();  // a submitting thread drives until then
  Decision fast_decision_;
  std::vector<const char*> fast_data_;
  Announcement fast_one_;   // a record's one collective (fast_round)
  std::string fast_label_;  // rank 0's label of it, which the agreed cache learns

  double beat_s_ = 0;  // liveness heartbeat interval (0: off)
  std::unordered_map<Request*, std::unique_ptr<Request>> owned_;  // async requests
  std::vector<ParsedRecord> parsed_;
  RecordWriter writer_;
  std::string context_;
  Algorithm last_algorithm_ = Algorithm::kAuto;

  // Observability (docs/timeline.md, docs/reliability.md).
  std::unique_ptr<StallInspector> inspector_;
  // Null until a timeline is started, then set once: hooks on any thread
  // test it and use it without a lock (`if (timeline_) timeline_->...`).
  class TimelineSlot {
   public:
    explicit operator bool() const { return get() != nullptr; }
    Timeline* operator->() const { return get(); }
    Timeline* get() const { return ptr_.load(std::memory_order_acquire); }
    void set(std::unique_ptr<Timeline> t);  // only while null
    Timeline* release();

   private:
    std::unique_ptr<Timeline> owned_;
    std::atomic<Timeline*> ptr_{nullptr};
  };
  TimelineSlot timeline_;
  std::mutex timeline_mu_;  // start/stop at run time
  std::unique_ptr<Fusion> fusion_;
  std::thread background_;  // last: it uses everything above
};

}  // namespace pytfcomm
