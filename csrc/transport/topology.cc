#include "transport/topology.h"

#include <map>

namespace pytfcomm::transport {

Topology make_topology(int rank, const std::vector<std::string>& hosts,
                       const std::vector<std::string>& host_ids) {
  Topology t;
  t.hosts = hosts;
  // Local group = same host, cross group = same local index on every host.
  std::map<std::string, std::vector<int>> by_host;
  std::vector<std::string> order;
  for (size_t r = 0; r < host_ids.size(); ++r) {
    if (!by_host.count(host_ids[r])) order.push_back(host_ids[r]);
    by_host[host_ids[r]].push_back(static_cast<int>(r));
  }
  t.num_hosts = static_cast<int>(order.size());
  const std::string& my_host = host_ids[static_cast<size_t>(rank)];
  const auto& mine = by_host[my_host];
  t.local_ranks = mine;
  for (size_t i = 0; i < mine.size(); ++i) {
    if (mine[i] == rank) t.local_index = static_cast<int>(i);
  }
  t.uniform_hosts = true;
  for (const auto& id : order) t.uniform_hosts &= by_host[id].size() == mine.size();
  if (t.uniform_hosts) {
    for (size_t h = 0; h < order.size(); ++h) {
      t.cross_ranks.push_back(by_host[order[h]][static_cast<size_t>(t.local_index)]);
      if (order[h] == my_host) t.cross_index = static_cast<int>(h);
    }
  }
  return t;
}

}  // namespace pytfcomm::transport
