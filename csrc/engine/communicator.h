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
//
// Inside, by responsibility (each part a class of its own):
//   Communicator   the public calls and the lifecycle (connect, close, fork,
//                  timeline); owns the parts below, the transport and the
//                  background thread.
//   EngineConfig   what connecting settled (rank, size, groups, agreed
//                  sizes): immutable, held by reference, read without a lock.
//   RequestQueue   the requests submitted, the streams that number them, who
//                  drives, and whether it is closed (request_queue.cc, and
//                  waiting.cc: await and the background thread's loop).
//   Driver         the negotiation rounds (driver.cc, out_of_step.cc,
//                  join.cc); one thread at a time, the one holding the role.
//   CollectiveExecutor       the data movement of a decided collective and the choice
//                  of algorithm and segments (execute.cc); the driver's.
//
// Lock order (docs/architecture.md, "Engine internals"). Outer to inner;
// a thread holding one may take only those below it:
//   1. Fusion::mu_, Fusion::queue_mu_, FusionQueue::mu_ (engine/fusion*.h):
//      held around whole collectives, which take the locks below.
//   2. Communicator::timeline_mu_: start/stop_timeline only; it takes the
//      timeline's own lock (4) and nothing else.
//   3. RequestQueue::mu_: the engine's one lock. Held briefly, never while
//      a thread waits for the transport, moves data, or runs a request's
//      on_done or alloc_out (those run on the driving thread, unlocked);
//      callers and the background thread sleep on its condition variables.
//      Under it: Transport::wake() (lock-free) and the timeline's clock.
//   4. Locks inside the transport, the timeline and the stall inspector:
//      leaves, taken within their own calls.
// The driver role is not a lock but a flag under mu_ (RequestQueue's
// driving_): who holds it uses the Driver, the CollectiveExecutor and the transport
// without mu_; close() takes it for good before it releases the transport.
// Read without a lock, and why that is enough:
//   - RequestQueue's has_submitted_ (acquire; set under mu_ after the
//     request is queued): lets the driver skip mu_ when nothing is new.
//   - closing_, interrupt_, interrupt_signal_: flags the driver polls in its
//     waits; whoever sets them then wakes the transport.
//   - sync_waiters_, async_pending_: counts a driver that is not a caller
//     (the background thread, an inline submitter) polls to hand over or
//     stop; interrupt_unattended reads async_pending_ from a signal's thread.
//   - The timeline slot (set once, acquire/release), g_fork_generation
//     (engine_config.h), Request::done() (request.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/collective.h"
#include "common/algorithm.h"
#include "common/dtype.h"
#include "engine/driver.h"
#include "engine/engine_config.h"
#include "engine/request.h"
#include "engine/request_queue.h"
#include "engine/timeline_slot.h"
#include "transport/transport.h"

namespace pytfcomm {

class Fusion;          // engine/fusion.h
class StallInspector;  // observe/stall_inspector.h
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

  int rank() const { return cfg_.rank; }
  int size() const { return cfg_.size; }
  int local_rank() const { return cfg_.local.me; }
  int local_size() const { return cfg_.local.size(); }
  int num_hosts() const { return cfg_.num_hosts; }
  // The port rank 0 listens on (useful when it was asked for port 0).
  int root_port() const { return cfg_.root_port; }
  // The deadline a call with timeout_s <= 0 gets (init's timeout, else PYTFCOMM_TIMEOUT).
  double default_timeout_s() const { return cfg_.timeout_s; }
  std::string host_of(int rank) const;
  // Topology, for backends that build their own groups (gpu/clique.cc).
  const algorithms::Group& local_group() const { return cfg_.local; }
  const algorithms::Group& cross_group() const { return cfg_.cross; }  // empty unless uniform
  bool uniform_hosts() const { return cfg_.uniform_hosts; }

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
  Algorithm last_algorithm() const { return driver_.executor().last_algorithm(); }
  // First messages of pairwise all-reduces this rank sent right behind its
  // records, and how many of its partners' it used (docs/negotiation.md).
  uint64_t ahead_sent() const { return driver_.executor().ahead_sent(); }
  uint64_t ahead_taken() const { return driver_.executor().ahead_taken(); }
  // How many streams it keeps a numbering for (tests: named ones go when idle).
  size_t stream_states() const;
  // The pipeline segment algorithm `a` runs an all-reduce of `bytes` in
  // (every rank alike).
  size_t allreduce_segment(Algorithm a, size_t bytes) const;

  // For a collective another backend runs outside the rounds (a GPU call
  // confirmed without one, gpu/gpu_collective.cc), every millisecond or so
  // while it waits: sends heartbeats and takes in what peers sent when no
  // other thread drives, and throws what closed this communicator (a lost
  // peer: kPeerLost) as the class of its cause. Any thread; never blocks.
  void watch_peers() { queue_.watch_peers(driver_); }

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

  // Several synchronous requests (built with make_request()) issued together
  // as consecutive calls of the caller's stream: one round can announce them
  // all and their data moves back to back. Returns when all are done; throws
  // the first one's error.
  void run_requests(Request* const* rs, size_t n, const CallKey* key = nullptr);

 private:
  void run_sync(algorithms::CollectiveKind kind, const void* in, void* out, size_t count,
                DType dtype, ReduceOp op, Algorithm algorithm, int root, double timeout_s,
                uint32_t shape_tag, const CallKey* key);
  // The fields allgatherv and alltoallv share: what each rank receives is
  // sized by `alloc` once the counts are known.
  void fill_variable(Request& r, algorithms::CollectiveKind kind, const void* in, size_t count,
                     DType dtype, const std::function<void*(uint64_t)>& alloc,
                     uint64_t* recv_counts, double timeout_s, uint32_t shape_tag) const;

  // Declared in the order they are made. transport_ first: connecting sets
  // it and returns cfg_. close() resets it once it holds the driver role for
  // good: the queue sees the null; the driver and executor use it only while
  // a thread drives.
  std::unique_ptr<transport::Transport> transport_;
  const EngineConfig cfg_;
  std::unique_ptr<StallInspector> inspector_;  // observability (docs/reliability.md)
  TimelineSlot timeline_;                      // docs/timeline.md
  std::mutex timeline_mu_;                     // start/stop at run time
  RequestQueue queue_;
  Driver driver_;
  std::unique_ptr<Fusion> fusion_;
  std::thread background_;  // last: it uses everything above
};

}  // namespace pytfcomm
