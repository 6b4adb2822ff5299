// The TF GPU kernels' C++ path below the TF boundary, without TensorFlow:
// pytfcomm::gpu::enqueue_on_stream (csrc/gpu/stream_collectives.h), called
// as csrc/tf/gpu_kernels.cc calls it, on CUDA streams of the driver
// stand-in (or of a real driver). tests/gpu/test_stream_collectives.py runs
// it as 2 processes.
//
//   stream_driver MODE RANK SIZE PORT
//
// Each process makes a pytfcomm Communicator (rank 0 listens on PORT) and,
// per local "GPU" (PTCSI_GPUS of the stand-in), a stream in the device's
// primary context, as TF has. Inputs are copied in on the stream right
// before each call (so the collective must wait for them); results are read
// on the stream after done(). Every done() is counted: exactly once each.
// Modes:
//   collectives  all-reduce (group of 1 on each GPU; group of 2: one op per
//                GPU, as MirroredStrategy builds it) for several dtypes and
//                ops, broadcast from each process, all-gather of 2 local
//                pieces; then errors that must reach done(): a bad argument
//                (before enqueue_on_stream returns) and a group member that
//                never arrives (at the deadline); the communicator still works.
//   mismatch     the processes pass different counts: MismatchError in done().
//   missing      process 1 never calls: process 0's done() gets the timeout.
// Prints "OK <what>" lines and "FAIL <what>" lines; exit status 0 iff no FAIL.
#include <cuda.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "engine/communicator.h"
#include "gpu/stream_collectives.h"

using pytfcomm::Communicator;
using pytfcomm::DType;
using pytfcomm::ReduceOp;
using pytfcomm::gpu::StreamCall;
using pytfcomm::gpu::StreamOp;
using pytfcomm::gpu::StreamTensor;

namespace {

int g_failures = 0;

void report(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "OK" : "FAIL", what.c_str());
  std::fflush(stdout);
  if (!ok) ++g_failures;
}

void cu(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  std::fprintf(stderr, "FAIL %s: %s\n", what, name ? name : "?");
  std::_Exit(2);
}

struct Gpu {
  CUcontext ctx = nullptr;
  CUstream stream = nullptr;
};

std::vector<Gpu> g_gpus;

// One call's completion: how many times done() ran, and with what.
struct Done {
  std::mutex mu;
  std::condition_variable cv;
  int calls = 0;
  std::string error;  // "" = success; else "<kind>: <message>"
  bool wait(double seconds) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return calls > 0; });
  }
};

std::vector<std::shared_ptr<Done>> g_all_dones;

pytfcomm::gpu::StreamDone make_done(const std::shared_ptr<Done>& d) {
  g_all_dones.push_back(d);
  return [d](std::exception_ptr e) {
    std::string text;
    if (e) {
      try {
        std::rethrow_exception(e);
      } catch (const pytfcomm::Error& err) {
        text = std::string(pytfcomm::error_class(err.kind()).python) + ": " + err.what();
      } catch (const std::exception& err) {
        text = std::string("std::exception: ") + err.what();
      }
    }
    std::lock_guard<std::mutex> lock(d->mu);
    if (d->calls++ == 0) d->error = text;
    d->cv.notify_all();
  };
}

CUdeviceptr alloc(int gpu, size_t bytes) {
  cu(cuCtxSetCurrent(g_gpus[gpu].ctx), "cuCtxSetCurrent");
  CUdeviceptr p = 0;
  cu(cuMemAlloc_v2(&p, bytes ? bytes : 1), "cuMemAlloc");
  return p;
}

// Host values (as doubles) -> `count` elements of `t` in device memory, on the stream.
void upload(int gpu, CUdeviceptr p, const std::vector<double>& v, DType t) {
  const size_t esz = pytfcomm::dtype_size(t);
  auto* bytes = new std::vector<char>(v.size() * esz);  // freed after the stream ran it
  for (size_t i = 0; i < v.size(); ++i) {
    char* dst = bytes->data() + i * esz;
    if (t == DType::kFloat32) {
      float f = static_cast<float>(v[i]);
      std::memcpy(dst, &f, 4);
    } else if (t == DType::kFloat64) {
      std::memcpy(dst, &v[i], 8);
    } else if (t == DType::kInt32) {
      int32_t x = static_cast<int32_t>(v[i]);
      std::memcpy(dst, &x, 4);
    } else {
      int64_t x = static_cast<int64_t>(v[i]);
      std::memcpy(dst, &x, 8);
    }
  }
  cu(cuCtxSetCurrent(g_gpus[gpu].ctx), "cuCtxSetCurrent");
  // Pageable source: read before the call returns, so `bytes` may go now.
  cu(cuMemcpyHtoDAsync_v2(p, bytes->data(), bytes->size(), g_gpus[gpu].stream), "HtoDAsync");
  delete bytes;
}

std::vector<double> download(int gpu, CUdeviceptr p, size_t count, DType t) {
  const size_t esz = pytfcomm::dtype_size(t);
  std::vector<char> bytes(count * esz);
  cu(cuCtxSetCurrent(g_gpus[gpu].ctx), "cuCtxSetCurrent");
  cu(cuMemcpyDtoHAsync_v2(bytes.data(), p, bytes.size(), g_gpus[gpu].stream), "DtoHAsync");
  cu(cuStreamSynchronize(g_gpus[gpu].stream), "cuStreamSynchronize");
  std::vector<double> v(count);
  for (size_t i = 0; i < count; ++i) {
    const char* src = bytes.data() + i * esz;
    if (t == DType::kFloat32) {
      float f;
      std::memcpy(&f, src, 4);
      v[i] = f;
    } else if (t == DType::kFloat64) {
      std::memcpy(&v[i], src, 8);
    } else if (t == DType::kInt32) {
      int32_t x;
      std::memcpy(&x, src, 4);
      v[i] = x;
    } else {
      int64_t x;
      std::memcpy(&x, src, 8);
      v[i] = static_cast<double>(x);
    }
  }
  return v;
}

// The value process p, GPU g puts at element i (small integers: exact in every dtype).
double value(int p, int g, size_t i) { return static_cast<double>((i % 7) + 3 * p + g + 1); }

struct Ctx {
  std::shared_ptr<Communicator> comm;
  int rank = 0;
  int size = 1;
  int64_t handle = 1;
  int64_t next_key = 100;
};

StreamCall base_call(Ctx& c, StreamOp op) {
  StreamCall call;
  call.op = op;
  call.comm = c.comm;
  call.comm_handle = c.handle;
  call.timeout_s = 20;
  return call;
}

bool close_to(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) return false;
  }
  return true;
}

// All-reduce over `members` local GPUs (one op each, one group) and every process.
void allreduce(Ctx& c, int members, DType t, ReduceOp op, size_t count) {
  std::string what = std::string("all-reduce ") + pytfcomm::dtype_name(t) + " " +
                     pytfcomm::op_name(op) + " x" + std::to_string(members) +
                     " GPUs n=" + std::to_string(count);
  const int64_t key = c.next_key++;
  std::vector<CUdeviceptr> in(members), out(members);
  std::vector<std::shared_ptr<Done>> dones;
  for (int g = 0; g < members; ++g) {
    const int gpu = members == 1 ? c.rank % static_cast<int>(g_gpus.size()) : g;
    in[g] = alloc(gpu, count * pytfcomm::dtype_size(t));
    out[g] = op == ReduceOp::kMax ? in[g] : alloc(gpu, count * pytfcomm::dtype_size(t));
    std::vector<double> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = value(c.rank, g, i);
    upload(gpu, in[g], v, t);
  }
  for (int g = 0; g < members; ++g) {
    const int gpu = members == 1 ? c.rank % static_cast<int>(g_gpus.size()) : g;
    StreamCall call = base_call(c, StreamOp::kAllReduce);
    call.reduce = op;
    call.group_size = members;
    call.group_rank = g;
    call.group_key = key;
    auto d = std::make_shared<Done>();
    dones.push_back(d);
    pytfcomm::gpu::enqueue_on_stream(g_gpus[gpu].stream, call,
                                     {StreamTensor{in[g], out[g], count, t}}, make_done(d));
  }
  const int n = members * c.size;
  std::vector<double> want(count);
  for (size_t i = 0; i < count; ++i) {
    double s = 0, mx = -1e300;
    for (int p = 0; p < c.size; ++p) {
      for (int g = 0; g < members; ++g) {
        s += value(p, g, i);
        mx = std::max(mx, value(p, g, i));
      }
    }
    if (op == ReduceOp::kSum) want[i] = s;
    if (op == ReduceOp::kMax) want[i] = mx;
    if (op == ReduceOp::kMean) {
      want[i] = s / n;
      if (t == DType::kInt32 || t == DType::kInt64) want[i] = static_cast<double>(int64_t(s) / n);
      if (t == DType::kFloat32) want[i] = static_cast<float>(static_cast<float>(s) / n);
    }
  }
  for (int g = 0; g < members; ++g) {
    const int gpu = members == 1 ? c.rank % static_cast<int>(g_gpus.size()) : g;
    if (!dones[g]->wait(60)) return report(false, what + ": done() not called in 60 s");
    if (!dones[g]->error.empty()) return report(false, what + ": " + dones[g]->error);
    if (!close_to(download(gpu, out[g], count, t), want)) {
      return report(false, what + ": wrong values on GPU " + std::to_string(gpu));
    }
  }
  report(true, what);
}

void broadcast(Ctx& c, int root, size_t count) {
  const std::string what = "broadcast root=" + std::to_string(root) + " n=" + std::to_string(count);
  const int gpu = c.rank % static_cast<int>(g_gpus.size());
  CUdeviceptr buf = alloc(gpu, count * 4);
  std::vector<double> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = value(c.rank, 0, i);
  upload(gpu, buf, v, DType::kFloat32);
  StreamCall call = base_call(c, StreamOp::kBroadcast);
  call.root = root;
  auto d = std::make_shared<Done>();
  pytfcomm::gpu::enqueue_on_stream(g_gpus[gpu].stream, call,
                                   {StreamTensor{buf, buf, count, DType::kFloat32}}, make_done(d));
  if (!d->wait(60)) return report(false, what + ": done() not called in 60 s");
  if (!d->error.empty()) return report(false, what + ": " + d->error);
  for (size_t i = 0; i < count; ++i) v[i] = value(root, 0, i);
  report(close_to(download(gpu, buf, count, DType::kFloat32), v), what);
}

// Two local pieces of n and 2n elements, concatenated, then across processes.
void allgather(Ctx& c, size_t n) {
  const std::string what = "all-gather 2 pieces n=" + std::to_string(n);
  const int gpu = c.rank % static_cast<int>(g_gpus.size());
  const size_t local = 3 * n;
  CUdeviceptr a = alloc(gpu, n * 8), b = alloc(gpu, 2 * n * 8);
  CUdeviceptr out = alloc(gpu, local * c.size * 8);
  std::vector<double> va(n), vb(2 * n);
  for (size_t i = 0; i < n; ++i) va[i] = 1000.0 * c.rank + i;
  for (size_t i = 0; i < 2 * n; ++i) vb[i] = 1000.0 * c.rank + n + i;
  upload(gpu, a, va, DType::kInt64);
  upload(gpu, b, vb, DType::kInt64);
  auto d = std::make_shared<Done>();
  pytfcomm::gpu::enqueue_on_stream(
      g_gpus[gpu].stream, base_call(c, StreamOp::kAllGather),
      {StreamTensor{a, out, n, DType::kInt64}, StreamTensor{b, 0, 2 * n, DType::kInt64}},
      make_done(d));
  if (!d->wait(60)) return report(false, what + ": done() not called in 60 s");
  if (!d->error.empty()) return report(false, what + ": " + d->error);
  std::vector<double> want;
  for (int p = 0; p < c.size; ++p) {
    for (size_t i = 0; i < local; ++i) want.push_back(1000.0 * p + i);
  }
  report(close_to(download(gpu, out, local * c.size, DType::kInt64), want), what);
}

// A bad argument: done() runs (once, with InvalidArgumentError) before the call returns.
void bad_argument(Ctx& c) {
  CUdeviceptr p = alloc(0, 16);
  StreamCall call = base_call(c, StreamOp::kAllReduce);
  call.group_size = 2;
  call.group_rank = 5;
  auto d = std::make_shared<Done>();
  pytfcomm::gpu::enqueue_on_stream(g_gpus[0].stream, call, {StreamTensor{p, p, 4, DType::kFloat32}},
                                   make_done(d));
  bool before = d->calls == 1;
  report(before && d->error.rfind("InvalidArgumentError", 0) == 0 &&
             d->error.find("group_rank 5") != std::string::npos,
         "bad argument reaches done() before enqueue_on_stream returns: " + d->error);
}

// Member 1 of a group of 2 never runs: member 0's done() gets the deadline.
void member_missing(Ctx& c) {
  CUdeviceptr p = alloc(0, 16);
  StreamCall call = base_call(c, StreamOp::kAllReduce);
  call.group_size = 2;
  call.group_key = c.next_key++;
  call.timeout_s = 1.5;
  auto d = std::make_shared<Done>();
  auto t0 = std::chrono::steady_clock::now();
  pytfcomm::gpu::enqueue_on_stream(g_gpus[0].stream, call, {StreamTensor{p, p, 4, DType::kFloat32}},
                                   make_done(d));
  bool called = d->wait(30);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  report(called && took < 10 && d->error.rfind("CommTimeoutError", 0) == 0 &&
             d->error.find("1 of 2 local GPUs") != std::string::npos,
         "missing group member times out in " + std::to_string(took) + " s: " + d->error);
}

// The processes disagree on the count: every process's done() gets a MismatchError.
void mismatch(Ctx& c) {
  const size_t count = 100 + c.rank;
  const int gpu = c.rank % static_cast<int>(g_gpus.size());  // the clique of the first call
  CUdeviceptr p = alloc(gpu, count * 4);
  auto d = std::make_shared<Done>();
  pytfcomm::gpu::enqueue_on_stream(g_gpus[gpu].stream, base_call(c, StreamOp::kAllReduce),
                                   {StreamTensor{p, p, count, DType::kFloat32}}, make_done(d));
  bool called = d->wait(60);
  report(called && d->error.rfind("MismatchError: workers ran different GPU all-reduces", 0) == 0,
         "mismatch: " + d->error);
}

// Process 1 never calls: process 0's all-reduce fails at its 2 s deadline.
void missing(Ctx& c) {
  allreduce(c, 1, DType::kFloat32, ReduceOp::kSum, 1000);  // set up and working
  if (c.rank == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(8));
    return report(true, "process 1 stayed away");
  }
  CUdeviceptr p = alloc(0, 4000);  // process 0: GPU 0, as in its first call
  StreamCall call = base_call(c, StreamOp::kAllReduce);
  call.timeout_s = 2;
  auto d = std::make_shared<Done>();
  auto t0 = std::chrono::steady_clock::now();
  pytfcomm::gpu::enqueue_on_stream(g_gpus[0].stream, call,
                                   {StreamTensor{p, p, 1000, DType::kFloat32}}, make_done(d));
  bool called = d->wait(30);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  report(
      called && took < 7 &&
          (d->error.rfind("CommTimeoutError", 0) == 0 || d->error.rfind("PeerLostError", 0) == 0),
      "missing process: done() after " + std::to_string(took) + " s: " + d->error);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s collectives|mismatch|missing RANK SIZE PORT\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  Ctx c;
  c.rank = std::atoi(argv[2]);
  c.size = std::atoi(argv[3]);
  cu(cuInit(0), "cuInit");
  int n = 0;
  cu(cuDeviceGetCount(&n), "cuDeviceGetCount");
  for (int i = 0; i < n; ++i) {
    Gpu g;
    cu(cuDevicePrimaryCtxRetain(&g.ctx, i), "cuDevicePrimaryCtxRetain");
    cu(cuCtxSetCurrent(g.ctx), "cuCtxSetCurrent");
    cu(cuStreamCreate(&g.stream, 0), "cuStreamCreate");
    g_gpus.push_back(g);
  }
  pytfcomm::CommOptions opts;
  opts.rank = c.rank;
  opts.size = c.size;
  opts.root_port = std::atoi(argv[4]);
  opts.timeout_s = 30;
  c.comm = std::make_shared<Communicator>(opts);

  if (mode == "collectives") {
    for (DType t : {DType::kFloat32, DType::kInt32, DType::kFloat64, DType::kInt64}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax}) {
        allreduce(c, 1, t, op, 1000);
      }
    }
    if (n >= 2) {
      for (DType t : {DType::kFloat32, DType::kInt64}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean}) allreduce(c, 2, t, op, 1000);
      }
      allreduce(c, 2, DType::kFloat32, ReduceOp::kSum, 300007);  // > one 1 MiB NCCL slot
    }
    for (int root = 0; root < c.size; ++root) broadcast(c, root, 5000);
    allgather(c, 777);
    bad_argument(c);
    if (n >= 2) member_missing(c);
    allreduce(c, 1, DType::kFloat32, ReduceOp::kSum, 10);  // still usable
  } else if (mode == "mismatch") {
    allreduce(c, 1, DType::kFloat32, ReduceOp::kSum, 10);
    mismatch(c);
  } else if (mode == "missing") {
    missing(c);
  } else {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  // done() exactly once: give a stray second call time to show.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  int twice = 0;
  for (const auto& d : g_all_dones) {
    std::lock_guard<std::mutex> lock(d->mu);
    if (d->calls != 1) ++twice;
  }
  report(twice == 0, std::to_string(g_all_dones.size()) + " done() calls, each exactly once (" +
                         std::to_string(twice) + " not)");
  std::printf("%s\n", g_failures == 0 ? "PASSED" : "FAILED");
  std::fflush(stdout);
  // Executors and cliques live until the process exits (as in TF): skip static destructors.
  std::_Exit(g_failures == 0 ? 0 : 1);
}
