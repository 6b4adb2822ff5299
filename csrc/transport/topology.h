// Where the ranks of a job run, as the engine and the algorithms need it:
// which ranks share a host (their host_id), and the groups that hierarchical
// algorithms build on. Plain rank lists: groups are the algorithms' business.
#pragma once

#include <string>
#include <vector>

namespace pytfcomm::transport {

struct Topology {
  std::vector<std::string> hosts;  // hosts[r]: rank r's address, for messages
  int num_hosts = 1;
  // The ranks of this rank's host, in rank order, and this rank's index there.
  std::vector<int> local_ranks;
  int local_index = 0;
  bool uniform_hosts = false;  // every host runs the same number of ranks
  // With uniform hosts: the rank of this local index on every host, in the
  // order the hosts first appear among the ranks, and this host's index there.
  std::vector<int> cross_ranks;
  int cross_index = 0;
};

// host_ids[r]: rank r's host identity (equal: one machine).
Topology make_topology(int rank, const std::vector<std::string>& hosts,
                       const std::vector<std::string>& host_ids);

}  // namespace pytfcomm::transport
