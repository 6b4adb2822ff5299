#include "engine/engine_config.h"

#include <pthread.h>

namespace pytfcomm {

std::atomic<uint64_t> g_fork_generation{0};

namespace {

[[maybe_unused]] const int kAtForkRegistered = [] {
  pthread_atfork(nullptr, nullptr, [] { g_fork_generation.fetch_add(1); });
  return 0;
}();

}  // namespace

}  // namespace pytfcomm
