// A communicator: the ranks of one job, connected, with the collectives the
// public API offers. Collectives on one communicator are serialised; every
// one carries a sequence number and its metadata so that ranks that
// disagree fail loudly. After any communication error the communicator is
// closed for good (peers are told why) and every later call says so.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "algorithms/collective.h"
#include "common/dtype.h"
#include "engine/stall_inspector.h"
#include "transport/transport.h"

namespace pytfcomm {

class Fusion;  // engine/fusion.h
class Timeline;

enum class Algorithm {
  kAuto = 0,
  kRing = 1,
  kHierarchical = 2,
  kRecursiveDoubling = 3,
  kOneShot = 4,
};
const char* algorithm_name(Algorithm a);

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
  std::string host_of(int rank) const;
  // Topology, for backends that build their own groups (gpu/nccl_comms.cc).
  const algorithms::Group& local_group() const { return local_; }
  const algorithms::Group& cross_group() const { return cross_; }  // empty unless uniform
  bool uniform_hosts() const { return uniform_hosts_; }

  // timeout_s <= 0 means the communicator's default. shape_tag: a digest of
  // the caller's array shape, compared across ranks (0: not given).
  void allreduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                 Algorithm algorithm, double timeout_s, uint32_t shape_tag = 0);
  void broadcast(void* buf, size_t count, DType dtype, int root, double timeout_s,
                 uint32_t shape_tag = 0);
  void allgather(const void* in, void* out, size_t count, DType dtype, double timeout_s,
                 uint32_t shape_tag = 0);
  // count: elements of `in`; `out` gets count / size elements.
  void reduce_scatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                      double timeout_s, uint32_t shape_tag = 0);
  void barrier(double timeout_s);

  // The algorithm "auto" would pick for an all-reduce of `bytes`.
  Algorithm choose_allreduce(size_t bytes) const;
  Algorithm last_algorithm() const { return last_algorithm_; }

  void close();
  bool closed() const;

  // Tensor fusion and asynchronous all-reduce on this communicator.
  Fusion& fusion() { return *fusion_; }
  // The timeline (PYTFCOMM_TIMELINE), null when off; its file path otherwise.
  Timeline* timeline() const { return timeline_.get(); }
  std::string timeline_path() const;

 private:
  template <typename Body>
  void run(algorithms::CollectiveKind kind, const char* name, DType dtype, ReduceOp op, int root,
           size_t count, double timeout_s, uint32_t shape_tag, Body body);
  void check_open() const;

  int rank_;
  int size_;
  int root_port_ = 0;
  int num_hosts_ = 1;
  bool uniform_hosts_ = false;  // every host runs the same number of ranks
  double timeout_s_;
  std::vector<std::string> hosts_;
  algorithms::Group world_, local_, cross_;
  std::unique_ptr<transport::Transport> transport_;
  algorithms::Workspace workspace_;
  mutable std::mutex mu_;
  uint32_t seq_ = 0;
  bool closed_ = false;
  std::string failure_;  // why the communicator was closed by an error
  std::string context_;  // the running collective, for messages (run() reuses it)
  Algorithm last_algorithm_ = Algorithm::kAuto;
  size_t oneshot_capacity_ = 0;  // agreed by all ranks at setup (0: no one-shot)
  // Observability (docs/timeline.md, docs/reliability.md); both live until
  // the destructor so run() may test timeline_ before taking mu_.
  std::unique_ptr<StallInspector> inspector_;
  std::unique_ptr<Timeline> timeline_;
  std::unique_ptr<Fusion> fusion_;  // last: its thread uses the members above
};

}  // namespace pytfcomm
