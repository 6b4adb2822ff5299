// The cross-process step of a pytfcomm TF op (docs/negotiation.md): its
// collectives go to the communicator as asynchronous requests, matched
// across workers by the op's instance key and the loop frame and iteration
// it runs in, never by the order TF runs ops in. No TF thread waits on
// other ranks for long: the op's thread runs its collectives itself only
// while the engine is idle and the peers keep up (PYTFCOMM_ASYNC_DRIVE_US),
// else the engine's thread does and calls back when they are done.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/communicator.h"
#include "engine/request.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace pytfcomm {
namespace tf {

// The stream of an op execution's collectives: its instance_key attr (the
// Python layer's "op:<function>#<n>" or, for eager ops, "thread:<name>", the
// same stream the calling thread's NumPy collectives use), mixed with the
// frame and iteration of a while loop (iterations may run concurrently).
uint64_t InstanceStream(const tensorflow::OpKernelContext* ctx, const std::string& instance_key);

// "allreduce train_step/pytfcomm_allreduce/PytfcommAllReduce": the kind, the
// outermost tf.function's name (from `instance_key`) and the op's node name,
// whole (a negotiation record carries up to kMaxLabelBytes of it).
std::string OpLabel(const char* kind, const tensorflow::OpKernelContext* ctx,
                    const std::string& instance_key);

// Submits `reqs` together (in order) and returns, after running them when
// this thread may (above). When every one has finished, on the thread that
// ran the last (often this one): `after` runs if all succeeded, the
// op's status becomes the first failure (mapped as Guard does) and done()
// is called. If the communicator cannot take them, that is the status.
void SubmitCrossWorker(tensorflow::OpKernelContext* ctx,
                       tensorflow::AsyncOpKernel::DoneCallback done, const char* what,
                       Communicator& comm, uint64_t stream, const std::string& label,
                       std::vector<std::unique_ptr<Request>> reqs, std::function<void()> after);

}  // namespace tf
}  // namespace pytfcomm
