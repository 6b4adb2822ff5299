#include "engine/user_interrupt.h"

#include <atomic>

#include "engine/registry.h"

namespace pytfcomm {
namespace {

std::atomic<int> g_unattended{0};
static_assert(std::atomic<int>::is_always_lock_free, "read from a signal handler");

}  // namespace

void note_unattended(int delta) { g_unattended.fetch_add(delta, std::memory_order_relaxed); }

int unattended_waits() { return g_unattended.load(std::memory_order_relaxed); }

int interrupt_unattended_all() {
  int n = 0;
  for (const auto& comm : live_communicators()) n += comm->interrupt_unattended() ? 1 : 0;
  return n;
}

}  // namespace pytfcomm
