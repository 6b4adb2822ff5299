#include "observe/traced_transport.h"

#include "observe/timeline.h"

namespace pytfcomm {
namespace {

constexpr int64_t kMinWaitNs = 2'000;  // shorter waits are noise, not blocking

}  // namespace

void TracedTransport::wait(transport::Handle h) {
  int64_t t0 = Timeline::now_ns();
  t_.wait(h);
  int64_t t1 = Timeline::now_ns();
  // Waits come roughly in posting order: search from the oldest live post.
  for (size_t i = head_; i < posts_.size(); ++i) {
    Post& p = posts_[i];
    if (!p.live || p.handle != h) continue;
    if (t1 - t0 >= kMinWaitNs) {
      tl_.add_wait(p.recv ? "wait_recv" : "wait_send", p.peer, p.bytes, t0, t1);
    }
    p.live = false;
    while (head_ < posts_.size() && !posts_[head_].live) ++head_;
    return;
  }
}

void TracedTransport::wait_all() {
  int64_t t0 = Timeline::now_ns();
  t_.wait_all();
  int64_t t1 = Timeline::now_ns();
  if (t1 - t0 >= kMinWaitNs) tl_.add_wait("wait_all", -1, 0, t0, t1);
  forget();
}

}  // namespace pytfcomm
