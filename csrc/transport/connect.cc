#include "transport/connect.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/param.h"
#include "transport/host/transport.h"
#include "transport/host/wait_policy.h"
#include "transport/shm/connect.h"
#include "transport/shm/doorbell.h"
#include "transport/shm/oneshot.h"
#include "transport/tcp/bootstrap.h"
#include "transport/tcp/extra_streams.h"
#include "transport/tcp/peer_stream.h"

namespace pytfcomm::transport {
namespace {

// How many TCP connections each pair of ranks on different hosts asks for.
int tcp_streams(int size) {
  const int64_t asked = params().tcp_streams;
  // auto: 4 (measured 1.5x over one at 16-64 MiB across veth), fewer in big
  // jobs, where every rank would hold 4 descriptors per remote rank.
  return asked > 0 ? static_cast<int>(asked) : size <= 16 ? 4 : size <= 64 ? 2 : 1;
}

// Every peer's stream: shared memory where setup made one, else TCP over the
// bootstrap connection and any extra ones.
std::vector<host::PeerLink> peer_links(int rank, tcp::BootstrapResult& boot,
                                       shm::LocalLinks& local) {
  const size_t n = boot.peers.size();
  boot.extra_fds.resize(n);
  local.streams.resize(n);
  std::vector<host::PeerLink> links(n);
  for (size_t r = 0; r < n; ++r) {
    if (static_cast<int>(r) == rank) continue;
    if (local.streams[r]) {
      links[r].stream = std::move(local.streams[r]);
      continue;
    }
    std::vector<net::Fd> fds;
    fds.push_back(std::move(boot.fds[r]));
    for (net::Fd& extra : boot.extra_fds[r]) fds.push_back(std::move(extra));
    if (fds.size() > 1) links[r].how = str_cat(fds.size(), " TCP streams");
    links[r].stream = tcp::make_peer_stream(std::move(fds), static_cast<int>(r));
  }
  return links;
}

// Agree, before any negotiation, on what every rank must do alike: the area
// size for rounds (0 where some rank lacks shared memory with some other),
// the largest in-round input, the liveness timeout, the ring's pipeline
// segments, auto's halving-doubling limit, whether every pair of ranks
// shares memory, the largest first step sent ahead and, where ranks outnumber
// cores, from what size per rank peers read this rank's memory by reference
// (`c`, which holds this rank's). Returns the heartbeat interval.
double agree_on_setup(host::HostTransport& t, const ConnectOptions& o, const AgreeMin& agree,
                      bool oversubscribed, Connection* c) {
  const RoundOptions& ro = o.rounds;
  const Params& p = params();
  constexpr int64_t kNone = INT64_MAX;
  const bool all_shm = t.shm_peers() == t.size() - 1;
  int64_t v[9] = {static_cast<int64_t>(t.local_area_capacity()),
                  static_cast<int64_t>(ro.frame_inputs),
                  static_cast<int64_t>(p.peer_timeout_s * 1000.0),
                  p.segment_bytes,
                  oversubscribed ? p.oversub_segment_bytes : kNone,
                  p.halving_bytes,
                  all_shm ? 1 : 0,
                  p.ahead_bytes,
                  oversubscribed && c->shm_by_ref_bytes > 0
                      ? static_cast<int64_t>(c->shm_by_ref_bytes)
                      : kNone};
  t.set_context("setup (agreeing on negotiation, liveness and algorithms)");
  t.set_deadline(deadline_after(o.job.connect_timeout_s));
  agree(t, v, 9);
  c->segment_bytes = static_cast<size_t>(v[3]);
  c->oversub_segment_bytes = v[4] == kNone ? 0 : static_cast<size_t>(v[4]);
  c->halving_bytes = static_cast<size_t>(v[5]);
  c->all_shared_memory = v[6] == 1;
  c->shm_halving_from = v[8] == kNone ? 0 : static_cast<size_t>(v[8]);
  t.configure_rounds(static_cast<size_t>(v[0]), ro.min_area_bytes,
                     ro.table_bytes + static_cast<size_t>(v[1]));
  t.set_ahead_limit(static_cast<size_t>(v[7]));  // none where records go through the areas
  c->ahead_bytes = t.ahead_limit();
  const double silence = static_cast<double>(v[2]) / 1000.0;
  const double beat_s = silence > 0 ? std::clamp(silence / 10.0, 0.02, 1.0) : 0.0;
  t.set_liveness(beat_s, silence);
  t.set_deadline(TimePoint::max());
  return beat_s;
}

}  // namespace

Connection connect(const ConnectOptions& o, const AgreeMin& agree) {
  const Params& p = params();
  const JobOptions& job = o.job;
  tcp::BootstrapResult boot = tcp::bootstrap(job);
  Connection c;
  c.root_port = boot.root_port;
  std::vector<std::string> hosts, host_ids;
  for (const auto& peer : boot.peers) {
    hosts.push_back(peer.host);
    host_ids.push_back(peer.host_id);
  }
  c.topology = make_topology(job.rank, hosts, host_ids);

  // Shared memory for the ranks of this host (auto/shm), TCP for the rest.
  // Each segment's one-shot area carries this rank's negotiation records.
  const shm::Mode mode = shm::parse_mode(o.mode);
  c.mode = shm::mode_name(mode);
  const int local_ranks = static_cast<int>(c.topology.local_ranks.size());
  int64_t by_ref = p.shm_by_ref_bytes;
  if (by_ref > 0 && p.oversub_shm_by_ref_bytes > 0 && host::ranks_outnumber_cores(local_ranks)) {
    by_ref = std::min(by_ref, p.oversub_shm_by_ref_bytes);
  }
  shm::LocalLinks local = shm::connect_local_peers(
      job.rank, boot.peers, boot.fds, mode, static_cast<size_t>(p.shm_ring_bytes),
      static_cast<size_t>(by_ref), o.rounds.area_inputs + o.rounds.table_bytes,
      deadline_after(job.connect_timeout_s));
  const host::WaitPolicy wait =
      host::choose_wait_policy(local_ranks, c.topology.num_hosts, local.own != nullptr);
  c.spin_us = wait.spin_us;
  c.shm_by_ref_bytes = local.by_ref_bytes;
  // Pairs of ranks on different hosts may use several TCP connections.
  std::vector<bool> remote(static_cast<size_t>(job.size));
  for (size_t r = 0; r < remote.size(); ++r) {
    remote[r] = host_ids[r] != host_ids[static_cast<size_t>(job.rank)];
  }
  tcp::connect_extra_streams(job.rank, boot, remote, tcp_streams(job.size), job.secret,
                             deadline_after(job.connect_timeout_s));

  std::vector<host::PeerLink> links = peer_links(job.rank, boot, local);
  // This rank's doorbell and the round areas live in shared memory (shm/);
  // the host transport sees them through transport/doorbell.h and round_areas.h.
  std::unique_ptr<transport::Doorbell> bell;
  if (local.own) bell = std::make_unique<shm::SegmentDoorbell>(local.own);
  auto t = std::make_unique<host::HostTransport>(
      job.rank, std::move(boot.peers), std::move(links), std::move(bell),
      std::make_unique<shm::OneShotAreas>(job.rank, local.segments), wait);
  c.shm_peers = t->shm_peers();
  // A peer that finished setup may send its first record before this rank
  // has: take records of up to what this rank offers.
  t->prepare_inbox(o.rounds.table_bytes + o.rounds.frame_inputs);
  c.segment_bytes = static_cast<size_t>(p.segment_bytes);
  c.halving_bytes = static_cast<size_t>(p.halving_bytes);
  if (job.size > 1) c.beat_s = agree_on_setup(*t, o, agree, wait.oversubscribed, &c);
  c.transport = std::move(t);
  return c;
}

}  // namespace pytfcomm::transport
