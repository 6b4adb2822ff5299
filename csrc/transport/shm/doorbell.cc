#include "transport/shm/doorbell.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>

#include "common/error.h"

namespace pytfcomm::shm {
namespace {

// Not FUTEX_PRIVATE_FLAG: the word is shared between processes.
long futex(std::atomic<uint32_t>* word, int op, uint32_t val, const timespec* timeout) {
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, val, timeout, nullptr, 0);
}

}  // namespace

void Doorbell::ring() noexcept {
  // Pairs with the fence in prepare(): either the owner sees our ring/tail
  // update in its last poll, or we see `sleeping` and wake it.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (h_->sleeping.load(std::memory_order_relaxed) == 0) return;
  h_->doorbell.fetch_add(1, std::memory_order_seq_cst);
  (void)futex(&h_->doorbell, FUTEX_WAKE, INT_MAX, nullptr);
}

uint32_t Doorbell::prepare() noexcept {
  uint32_t seq = h_->doorbell.load(std::memory_order_acquire);
  h_->sleeping.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return seq;
}

void Doorbell::sleep(uint32_t seq, int64_t timeout_us) {
  timespec ts{static_cast<time_t>(timeout_us / 1000000),
              static_cast<long>((timeout_us % 1000000) * 1000)};
  long rc = futex(&h_->doorbell, FUTEX_WAIT, seq, &ts);
  int err = errno;
  h_->sleeping.store(0, std::memory_order_relaxed);
  // EAGAIN: rung before we slept; EINTR, ETIMEDOUT: the caller looks again.
  if (rc != 0 && err != EAGAIN && err != EINTR && err != ETIMEDOUT) {
    PTC_THROW(kInternal, "futex wait on the shared-memory doorbell failed: ", std::strerror(err));
  }
}

void Doorbell::cancel() noexcept { h_->sleeping.store(0, std::memory_order_relaxed); }

}  // namespace pytfcomm::shm
