#include "engine/registry.h"

#include <map>
#include <mutex>

namespace pytfcomm {
namespace {

std::mutex& mu() {
  static std::mutex m;
  return m;
}
std::map<int64_t, std::weak_ptr<Communicator>>& table() {
  static std::map<int64_t, std::weak_ptr<Communicator>> t;
  return t;
}
int64_t g_next = 1;

}  // namespace

int64_t register_communicator(const std::shared_ptr<Communicator>& comm) {
  std::lock_guard<std::mutex> lock(mu());
  for (auto& [h, weak] : table()) {
    if (weak.lock() == comm) return h;
  }
  int64_t h = g_next++;
  table()[h] = comm;
  return h;
}

std::shared_ptr<Communicator> find_communicator(int64_t handle) {
  std::lock_guard<std::mutex> lock(mu());
  auto it = table().find(handle);
  return it == table().end() ? nullptr : it->second.lock();
}

std::vector<std::shared_ptr<Communicator>> live_communicators() {
  std::lock_guard<std::mutex> lock(mu());
  std::vector<std::shared_ptr<Communicator>> out;
  for (auto& [h, weak] : table()) {
    if (auto c = weak.lock()) out.push_back(std::move(c));
  }
  return out;
}

}  // namespace pytfcomm
