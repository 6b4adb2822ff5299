#include "tf/cross_worker.h"

#include <atomic>
#include <mutex>

#include "common/digest.h"
#include "engine/request.h"
#include "tf/tf_common.h"

namespace pytfcomm {
namespace tf {

uint64_t InstanceStream(const tensorflow::OpKernelContext* ctx, const std::string& instance_key) {
  uint64_t s = fnv1a64(instance_key);
  const tensorflow::FrameAndIter fi = ctx->frame_iter();
  if (fi.frame_id != 0 || fi.iter_id != 0) {
    s = fnv1a64_mix(fnv1a64_mix(s, static_cast<uint64_t>(fi.frame_id)),
                    static_cast<uint64_t>(fi.iter_id));
  }
  return s & ~kNamedStreamBit;  // numbered for good, unlike name= calls
}

std::string OpLabel(const char* kind, const tensorflow::OpKernelContext* ctx,
                    const std::string& instance_key) {
  const std::string& node = ctx->op_kernel().name();
  std::string label(kind);
  label += ' ';
  // "op:<function>#<n>" (_ordering.py): node names inside a tf.function do
  // not say which function they are in, and two functions' nodes often have
  // the same name.
  const size_t hash = instance_key.rfind('#');
  if (instance_key.compare(0, 3, "op:") == 0 && hash != std::string::npos && hash > 3) {
    label.append(instance_key, 3, hash - 3).append("/").append(node);
  } else if (instance_key.compare(0, 7, "thread:") == 0) {
    label.append(node).append(" (eager, thread ").append(instance_key, 7).append(")");
  } else {
    label.append(node);
  }
  return label;
}

namespace {

// What the callbacks of one op execution share.
struct Pending {
  std::atomic<int> left{0};
  std::mutex mu;
  absl::Status status;  // the first failure
  tensorflow::OpKernelContext* ctx;
  tensorflow::AsyncOpKernel::DoneCallback done;
  const char* what;
  std::function<void()> after;
};

}  // namespace

void SubmitCrossWorker(tensorflow::OpKernelContext* ctx,
                       tensorflow::AsyncOpKernel::DoneCallback done, const char* what,
                       Communicator& comm, uint64_t stream, const std::string& label,
                       std::vector<std::unique_ptr<Request>> reqs, std::function<void()> after) {
  auto p = std::make_shared<Pending>();
  p->left.store(static_cast<int>(reqs.size()));
  p->ctx = ctx;
  p->done = std::move(done);
  p->what = what;
  p->after = std::move(after);
  for (auto& r : reqs) {
    r->on_done = [p](std::exception_ptr error) {
      if (error) {
        std::lock_guard<std::mutex> lock(p->mu);
        if (p->status.ok()) p->status = StatusOf(p->what, error);
      }
      if (p->left.fetch_sub(1) != 1) return;
      absl::Status status = p->status;
      if (status.ok() && p->after) status = Guard(p->what, p->after);
      p->ctx->SetStatus(status);
      p->done();
    };
  }
  absl::Status submitted =
      Guard(what, [&] { comm.submit_async(std::move(reqs), stream, label, true); });
  if (!submitted.ok()) {
    ctx->SetStatus(submitted);
    p->done();
  }
}

}  // namespace tf
}  // namespace pytfcomm
