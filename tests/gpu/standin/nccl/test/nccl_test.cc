// Drives the NCCL stand-in (libnccl.so.2) as pytfcomm would, one process per
// rank (or per group of ranks): `nccl_test <mode> <nprocs> <proc> <dir>`.
// Run by tests/gpu/test_standin_nccl.py; exits 0 on success, else prints
// what failed. Every wait is bounded. `dir` is a scratch directory the
// processes meet in (the unique id is passed through files there).
#include <cuda.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

#define CHECK(cond, ...)                                                                        \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      std::fprintf(stderr, "[proc %d] CHECK failed at line %d: %s: ", g_proc, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                        \
      std::fprintf(stderr, "\n");                                                               \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

int g_proc = 0;
int g_nprocs = 1;
std::string g_dir;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// ---- rendezvous through files ------------------------------------------------

void put_file(const std::string& name, const void* data, size_t n) {
  std::string tmp = g_dir + "/." + name + "." + std::to_string(getpid());
  {
    std::ofstream f(tmp, std::ios::binary);
    f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
  }
  CHECK(std::rename(tmp.c_str(), (g_dir + "/" + name).c_str()) == 0, "rename %s", name.c_str());
}

void wait_file(const std::string& name, void* data, size_t n, double timeout = 30) {
  auto t = Clock::now();
  for (;;) {
    std::ifstream f(g_dir + "/" + name, std::ios::binary);
    if (f) {
      f.read(static_cast<char*>(data), static_cast<std::streamsize>(n));
      CHECK(static_cast<size_t>(f.gcount()) == n, "short file %s", name.c_str());
      return;
    }
    CHECK(since(t) < timeout, "timed out waiting for %s", name.c_str());
    sleep_ms(2);
  }
}

void flag(const std::string& name) { put_file(name, "1", 1); }
void wait_flag(const std::string& name, double timeout = 30) {
  char c;
  wait_file(name, &c, 1, timeout);
}

// The id for `tag`, made by process 0.
ncclUniqueId shared_id(const std::string& tag) {
  ncclUniqueId id;
  if (g_proc == 0) {
    CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
    CHECK(std::memcmp(id.internal, "ptcsi-nccl-uid", 14) == 0, "id prefix");
    put_file("uid-" + tag, &id, sizeof(id));
  } else {
    wait_file("uid-" + tag, &id, sizeof(id));
  }
  return id;
}

// ---- streams and communicators -------------------------------------------------

// The device's primary context, current on the calling thread (CUDA's
// current context is per thread).
void ensure_ctx() {
  static CUcontext ctx = [] {
    CUdevice d;
    CUcontext c;
    CHECK(cuInit(0) == CUDA_SUCCESS, "cuInit");
    CHECK(cuDeviceGet(&d, 0) == CUDA_SUCCESS, "cuDeviceGet");
    CHECK(cuDevicePrimaryCtxRetain(&c, d) == CUDA_SUCCESS, "retain");
    return c;
  }();
  thread_local bool set = false;
  if (!set) CHECK(cuCtxSetCurrent(ctx) == CUDA_SUCCESS, "set current");
  set = true;
}

CUstream new_stream() {
  ensure_ctx();
  CUstream s;
  CHECK(cuStreamCreate(&s, 0) == CUDA_SUCCESS, "cuStreamCreate");
  return s;
}

// Stand-in device memory is host memory: written and read directly here.
// Never freed (work may still be queued when a test gives up on it).
void* dev_alloc(size_t bytes) {
  ensure_ctx();
  CUdeviceptr d = 0;
  CHECK(cuMemAlloc(&d, bytes ? bytes : 1) == CUDA_SUCCESS, "cuMemAlloc(%zu)", bytes);
  std::memset(reinterpret_cast<void*>(d), 0, bytes);
  return reinterpret_cast<void*>(d);
}

template <class T>
struct DevVec {
  T* p;
  size_t n;
  explicit DevVec(size_t count, T v = T())
      : p(static_cast<T*>(dev_alloc(count * sizeof(T)))), n(count) {
    for (size_t i = 0; i < n; ++i) p[i] = v;
  }
  T* data() const { return p; }
  size_t size() const { return n; }
  T& operator[](size_t i) const { return p[i]; }
  T* begin() const { return p; }
  T* end() const { return p + n; }
};

struct Marker {
  CUevent e = nullptr;
  explicit Marker(CUstream s) {
    CHECK(cuEventCreate(&e, 0) == CUDA_SUCCESS, "cuEventCreate");
    CHECK(cuEventRecord(e, s) == CUDA_SUCCESS, "cuEventRecord");
  }
  CUresult query() const { return cuEventQuery(e); }
  // Waits (bounded) until the stream reached the marker; its result.
  CUresult wait(double timeout = 60) const {
    auto t = Clock::now();
    for (;;) {
      CUresult r = query();
      if (r != CUDA_ERROR_NOT_READY) return r;
      CHECK(since(t) < timeout, "timed out waiting for a stream");
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
};

CUresult sync(CUstream s, double timeout = 60) { return Marker(s).wait(timeout); }

ncclResult_t async_state(ncclComm_t c) {
  ncclResult_t st = ncclSuccess;
  CHECK(ncclCommGetAsyncError(c, &st) == ncclSuccess, "ncclCommGetAsyncError");
  return st;
}

// Polls until the comm is no longer in progress (bounded); its state.
ncclResult_t settle(ncclComm_t c, double timeout = 30) {
  auto t = Clock::now();
  for (;;) {
    ncclResult_t st = async_state(c);
    if (st != ncclInProgress) return st;
    CHECK(since(t) < timeout, "timed out settling a communicator");
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

ncclComm_t init_rank(const ncclUniqueId& id, int nranks, int rank, int blocking = 0) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = blocking;
  ncclComm_t c = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&c, nranks, id, rank, &config);
  CHECK(r == (blocking ? ncclSuccess : ncclInProgress), "init returned %d (%s)", r,
        ncclGetLastError(nullptr));
  if (!blocking) CHECK(settle(c) == ncclSuccess, "init settled with an error");
  return c;
}

void finalize_destroy(ncclComm_t c) {
  ncclResult_t r = ncclCommFinalize(c);
  CHECK(r == ncclSuccess || r == ncclInProgress, "finalize %d", r);
  CHECK(settle(c) == ncclSuccess, "finalize settled with an error");
  CHECK(ncclCommDestroy(c) == ncclSuccess, "destroy");
  ncclResult_t st;
  CHECK(ncclCommGetAsyncError(c, &st) == ncclInvalidArgument, "destroyed comm still valid");
}

// ---- reference arithmetic (independent of the library's) -------------------------

struct Half {
  uint16_t bits;
};
struct BF16 {
  uint16_t bits;
};

float to_float(Half h) {
  _Float16 f;
  std::memcpy(&f, &h.bits, 2);
  return static_cast<float>(f);
}
Half from_float_h(float x) {
  _Float16 f = static_cast<_Float16>(x);  // GCC: round to nearest even
  Half h;
  std::memcpy(&h.bits, &f, 2);
  return h;
}
float to_float(BF16 b) {
  uint32_t u = static_cast<uint32_t>(b.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
BF16 from_float_b(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  uint32_t lower = u & 0xffff0000u, rem = u & 0xffffu;
  uint32_t pick = rem > 0x8000u          ? lower + 0x10000u
                  : rem < 0x8000u        ? lower
                  : ((lower >> 16) & 1u) ? lower + 0x10000u
                                         : lower;
  return BF16{static_cast<uint16_t>(pick >> 16)};
}

template <class T>
T ref_op(ncclRedOp_t op, T a, T b) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BF16>) {
    float x = to_float(a), y = to_float(b);
    float z = op == ncclProd  ? x * y
              : op == ncclMax ? (x > y ? x : y)
              : op == ncclMin ? (x < y ? x : y)
                              : x + y;
    if constexpr (std::is_same_v<T, Half>) {
      return from_float_h(z);
    } else {
      return from_float_b(z);
    }
  } else if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    uint64_t x = static_cast<U>(a), y = static_cast<U>(b);
    if (op == ncclProd) return static_cast<T>(static_cast<U>(x * y));
    if (op == ncclMax) return a > b ? a : b;
    if (op == ncclMin) return a < b ? a : b;
    return static_cast<T>(static_cast<U>(x + y));
  } else {
    return op == ncclProd  ? a * b
           : op == ncclMax ? (a > b ? a : b)
           : op == ncclMin ? (a < b ? a : b)
                           : a + b;
  }
}

template <class T>
T ref_avg(T sum, int n) {
  if constexpr (std::is_same_v<T, Half>) {
    return from_float_h(to_float(sum) / static_cast<float>(n));
  } else if constexpr (std::is_same_v<T, BF16>) {
    return from_float_b(to_float(sum) / static_cast<float>(n));
  } else {
    return static_cast<T>(sum / static_cast<T>(n));
  }
}

// Input element i of `rank` for test case `k` (integers large enough to wrap).
template <class T>
T gen(int rank, size_t i, int k) {
  const int64_t base = static_cast<int64_t>(rank) * 37 + static_cast<int64_t>(i) * 11 + k * 3;
  // Halves plus multiples of 2^-9: sums need more bits than bfloat16 (and
  // often float16) hold, so rounding, ties included, is exercised.
  const double f =
      static_cast<double>((base % 9) - 4) * 0.5 + static_cast<double>((base % 13) - 6) / 512.0;
  if constexpr (std::is_same_v<T, Half>) {
    return from_float_h(static_cast<float>(f));
  } else if constexpr (std::is_same_v<T, BF16>) {
    return from_float_b(static_cast<float>(f));
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(f);
  } else {
    using U = std::make_unsigned_t<T>;
    uint64_t v = static_cast<uint64_t>(base % 251);
    if (sizeof(T) >= 4) v *= 0x01000193ull;  // large enough to wrap in products
    return static_cast<T>(static_cast<U>(v));
  }
}

template <class T>
T ref_reduce(ncclRedOp_t op, int n, size_t i, int k) {
  T acc = gen<T>(0, i, k);
  for (int r = 1; r < n; ++r) acc = ref_op(op == ncclAvg ? ncclSum : op, acc, gen<T>(r, i, k));
  return op == ncclAvg ? ref_avg(acc, n) : acc;
}

// ---- the exhaustive small suite -----------------------------------------------------

const ncclRedOp_t kOps[] = {ncclSum, ncclProd, ncclMin, ncclMax, ncclAvg};

struct Check {
  const char* out;  // where the result lands (owned by the Buffers)
  std::vector<char> want;
  std::string what;
};

// Buffers whose addresses stay put while more are added.
struct Buffers {
  char* get(size_t bytes) { return static_cast<char*>(dev_alloc(bytes)); }
};

template <class T>
void put(char* p, size_t i, T v) {
  std::memcpy(p + i * sizeof(T), &v, sizeof(T));
}

template <class T>
void enqueue_cases(ncclDataType_t type, const char* tname, ncclComm_t comm, int n, int me,
                   CUstream s, size_t C, std::vector<Check>& checks, Buffers& b, int& k) {
  const size_t N = C * static_cast<size_t>(n);
  for (int inplace = 0; inplace < 2; ++inplace) {
    const std::string ip = inplace ? " in-place" : "";
    for (ncclRedOp_t op : kOps) {
      const std::string on = std::string(tname) + " op " + std::to_string(op) + ip;
      ++k;
      {  // all-reduce
        char* in = b.get(C * sizeof(T));
        char* out = inplace ? in : b.get(C * sizeof(T));
        Check c{out, std::vector<char>(C * sizeof(T)), "AllReduce " + on};
        for (size_t i = 0; i < C; ++i) {
          put(in, i, gen<T>(me, i, k));
          put(c.want.data(), i, ref_reduce<T>(op, n, i, k));
        }
        CHECK(ncclAllReduce(in, out, C, type, op, comm, s) == ncclSuccess, "AR");
        checks.push_back(std::move(c));
      }
      ++k;
      {  // reduce-scatter: the send buffer holds n blocks of C
        char* in = b.get(N * sizeof(T));
        for (size_t j = 0; j < N; ++j) put(in, j, gen<T>(me, j, k));
        char* out = inplace ? in + static_cast<size_t>(me) * C * sizeof(T) : b.get(C * sizeof(T));
        Check c{out, std::vector<char>(C * sizeof(T)), "ReduceScatter " + on};
        for (size_t i = 0; i < C; ++i) {
          put(c.want.data(), i, ref_reduce<T>(op, n, static_cast<size_t>(me) * C + i, k));
        }
        CHECK(ncclReduceScatter(in, out, C, type, op, comm, s) == ncclSuccess, "RS");
        checks.push_back(std::move(c));
      }
    }
    ++k;
    {  // all-gather
      char* out = b.get(N * sizeof(T));
      char* in = inplace ? out + static_cast<size_t>(me) * C * sizeof(T) : b.get(C * sizeof(T));
      Check c{out, std::vector<char>(N * sizeof(T)), std::string("AllGather ") + tname + ip};
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < C; ++i) {
          put(c.want.data(), static_cast<size_t>(r) * C + i, gen<T>(r, i, k));
        }
      }
      for (size_t i = 0; i < C; ++i) put(in, i, gen<T>(me, i, k));
      CHECK(ncclAllGather(in, out, C, type, comm, s) == ncclSuccess, "AG");
      checks.push_back(std::move(c));
    }
    ++k;
    {  // broadcast from a root that varies with the case
      const int root = k % n;
      char* in = b.get(C * sizeof(T));
      char* out = inplace ? in : b.get(C * sizeof(T));
      Check c{out, std::vector<char>(C * sizeof(T)),
              std::string("Broadcast ") + tname + " root " + std::to_string(root) + ip};
      for (size_t i = 0; i < C; ++i) {
        put(in, i, gen<T>(me, i, k));
        put(c.want.data(), i, gen<T>(root, i, k));
      }
      CHECK(ncclBroadcast(in, out, C, type, root, comm, s) == ncclSuccess, "BC");
      checks.push_back(std::move(c));
    }
  }
}

void enqueue_all_types(ncclComm_t comm, int n, int me, CUstream s, size_t C,
                       std::vector<Check>& checks, Buffers& b) {
  int k = 0;
  enqueue_cases<int8_t>(ncclInt8, "int8", comm, n, me, s, C, checks, b, k);
  enqueue_cases<uint8_t>(ncclUint8, "uint8", comm, n, me, s, C, checks, b, k);
  enqueue_cases<int32_t>(ncclInt32, "int32", comm, n, me, s, C, checks, b, k);
  enqueue_cases<uint32_t>(ncclUint32, "uint32", comm, n, me, s, C, checks, b, k);
  enqueue_cases<int64_t>(ncclInt64, "int64", comm, n, me, s, C, checks, b, k);
  enqueue_cases<uint64_t>(ncclUint64, "uint64", comm, n, me, s, C, checks, b, k);
  enqueue_cases<Half>(ncclFloat16, "float16", comm, n, me, s, C, checks, b, k);
  enqueue_cases<BF16>(ncclBfloat16, "bfloat16", comm, n, me, s, C, checks, b, k);
  enqueue_cases<float>(ncclFloat32, "float32", comm, n, me, s, C, checks, b, k);
  enqueue_cases<double>(ncclFloat64, "float64", comm, n, me, s, C, checks, b, k);
}

void verify(const std::vector<Check>& checks) {
  int bad = 0;
  for (const Check& c : checks) {
    if (std::memcmp(c.out, c.want.data(), c.want.size()) != 0) {
      size_t at = 0;
      while (c.out[at] == c.want[at]) ++at;
      std::fprintf(stderr, "[proc %d] WRONG: %s (first differing byte %zu: %d, want %d)\n", g_proc,
                   c.what.c_str(), at, c.out[at], c.want[at]);
      ++bad;
    }
  }
  CHECK(bad == 0, "%d of %zu results wrong", bad, checks.size());
}

// ---- modes -------------------------------------------------------------------------------

// Every collective x type x op, out-of-place and in place, against the
// reference; then finalize + destroy. One rank per process.
void mode_all(size_t C) {
  const int n = g_nprocs, me = g_proc;
  if (me == 0) {
    int v = 0;
    CHECK(ncclGetVersion(&v) == ncclSuccess && v >= 23000, "version %d", v);
    CHECK(std::strlen(ncclGetErrorString(ncclInvalidUsage)) > 0, "error string");
    CHECK(ncclGroupEnd() == ncclInvalidUsage, "unbalanced ncclGroupEnd");
    ncclConfig_t bad{};  // not NCCL_CONFIG_INITIALIZER
    ncclComm_t c = nullptr;
    ncclUniqueId id;
    CHECK(ncclGetUniqueId(&id) == ncclSuccess, "id");
    CHECK(ncclCommInitRankConfig(&c, 1, id, 0, &bad) == ncclInvalidArgument, "bad config");
    CHECK(std::strstr(ncclGetLastError(nullptr), "NCCL_CONFIG_INITIALIZER") != nullptr, "text");
  }
  ncclUniqueId id = shared_id("all");
  ncclComm_t comm = init_rank(id, n, me);
  CUstream s = new_stream();
  std::vector<Check> checks;
  Buffers b;
  enqueue_all_types(comm, n, me, s, C, checks, b);
  // Finalize with work queued: in progress until the stream ran it. Every
  // result is in place the moment it settles (read at once, no wait); a marker
  // recorded after the work may finish a moment later (the stream's next
  // item, as on a GPU), so it gets a bounded wait, not an instant query.
  Marker m(s);
  ncclResult_t r = ncclCommFinalize(comm);
  CHECK(r == ncclSuccess || r == ncclInProgress, "finalize %d", r);
  CHECK(settle(comm) == ncclSuccess, "finalize settled with an error: %s",
        ncclGetLastError(nullptr));
  verify(checks);
  CHECK(m.wait(10) == CUDA_SUCCESS, "the stream did not finish after finalize");
  CHECK(ncclCommDestroy(comm) == ncclSuccess, "destroy");
  CHECK(ncclAllReduce(b.get(8), b.get(8), 1, ncclInt32, ncclSum, comm, s) == ncclInvalidArgument,
        "use after destroy");
  CHECK(ncclCommDestroy(comm) == ncclInvalidArgument, "double destroy");
  std::printf("[proc %d] %zu collectives correct\n", me, checks.size());
}

// 16 MiB buffers: chunked through the 1 MiB slots.
void mode_big() {
  const int n = g_nprocs, me = g_proc;
  ncclComm_t comm = init_rank(shared_id("big"), n, me);
  CUstream s = new_stream();
  const size_t B = 16u << 20;
  DevVec<float> ar(B / 4);
  for (size_t i = 0; i < ar.size(); ++i)
    ar[i] = static_cast<float>((i + static_cast<size_t>(me)) % 1000);
  DevVec<int32_t> rs_in(B / 4), rs_out(B / 4 / static_cast<size_t>(n));
  for (size_t i = 0; i < rs_in.size(); ++i)
    rs_in[i] = static_cast<int32_t>(i * 7 + static_cast<size_t>(me));
  const size_t ag_count = B / static_cast<size_t>(n) + 3;  // ragged against the slot
  DevVec<uint8_t> ag_in(ag_count), ag_out(ag_count * static_cast<size_t>(n));
  for (size_t i = 0; i < ag_count; ++i)
    ag_in[i] = static_cast<uint8_t>(i * 31 + static_cast<size_t>(me) * 7);
  DevVec<uint16_t> bc(B / 2 + 1);
  for (size_t i = 0; i < bc.size(); ++i) bc[i] = me == 1 ? static_cast<uint16_t>(i * 13) : 0;
  auto t = Clock::now();
  CHECK(
      ncclAllReduce(ar.data(), ar.data(), ar.size(), ncclFloat32, ncclSum, comm, s) == ncclSuccess,
      "AR");
  CHECK(ncclReduceScatter(rs_in.data(), rs_out.data(), rs_out.size(), ncclInt32, ncclMax, comm,
                          s) == ncclSuccess,
        "RS");
  CHECK(ncclAllGather(ag_in.data(), ag_out.data(), ag_count, ncclUint8, comm, s) == ncclSuccess,
        "AG");
  CHECK(ncclBroadcast(bc.data(), bc.data(), bc.size(), ncclBfloat16, 1 % n, comm, s) == ncclSuccess,
        "BC");
  CHECK(sync(s) == CUDA_SUCCESS, "stream failed");
  double took = since(t);
  for (size_t i = 0; i < ar.size(); ++i) {
    float want = 0;
    for (int r = 0; r < n; ++r) want += static_cast<float>((i + static_cast<size_t>(r)) % 1000);
    CHECK(ar[i] == want, "AR[%zu] = %f, want %f", i, ar[i], want);
  }
  for (size_t i = 0; i < rs_out.size(); ++i) {
    size_t j = static_cast<size_t>(me) * rs_out.size() + i;
    int32_t want = static_cast<int32_t>(j * 7 + static_cast<size_t>(n - 1));
    CHECK(rs_out[i] == want, "RS[%zu] = %d, want %d", i, rs_out[i], want);
  }
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < ag_count; ++i) {
      uint8_t want = static_cast<uint8_t>(i * 31 + static_cast<size_t>(r) * 7);
      CHECK(ag_out[static_cast<size_t>(r) * ag_count + i] == want, "AG[%d][%zu]", r, i);
    }
  }
  for (size_t i = 0; i < bc.size(); ++i) {
    uint16_t want = n > 1 ? static_cast<uint16_t>(i * 13) : bc[i];
    CHECK(bc[i] == want, "BC[%zu]", i);
  }
  finalize_destroy(comm);
  std::printf("[proc %d] 16 MiB collectives correct in %.3f s\n", me, took);
}

// Two ranks per process, in one group (as pytfcomm's clique does), each on
// its own stream; then blocking init from two threads.
void mode_group() {
  const int L = 2, n = g_nprocs * L;
  ncclUniqueId id = shared_id("group");
  ncclComm_t comms[L];
  CUstream streams[L];
  CHECK(ncclGroupStart() == ncclSuccess, "start");
  CHECK(ncclGroupStart() == ncclSuccess, "nested start");
  for (int i = 0; i < L; ++i) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&comms[i], n, id, g_proc * L + i, &config);
    CHECK(r == ncclSuccess || r == ncclInProgress, "init in group %d", r);
    streams[i] = new_stream();
  }
  CHECK(ncclGroupEnd() == ncclSuccess, "nested end");
  CHECK(ncclGroupEnd() == ncclSuccess, "end");
  for (ncclComm_t c : comms) CHECK(settle(c) == ncclSuccess, "settle");
  const size_t C = 1000;
  std::vector<DevVec<int64_t>> in, out, ag;
  for (int i = 0; i < L; ++i) {
    const int rank = g_proc * L + i;
    in.emplace_back(C);
    out.emplace_back(C);
    ag.emplace_back(C * static_cast<size_t>(n));
    for (size_t j = 0; j < C; ++j)
      in[static_cast<size_t>(i)][j] = static_cast<int64_t>(j) * (rank + 1);
  }
  for (int round = 0; round < 3; ++round) {
    CHECK(ncclGroupStart() == ncclSuccess, "start");
    for (int i = 0; i < L; ++i) {
      CHECK(ncclAllReduce(in[i].data(), out[i].data(), C, ncclInt64, ncclSum, comms[i],
                          streams[i]) == ncclSuccess,
            "AR");
    }
    CHECK(ncclGroupStart() == ncclSuccess, "nested");
    for (int i = 0; i < L; ++i) {
      CHECK(ncclAllGather(in[i].data(), ag[i].data(), C, ncclInt64, comms[i], streams[i]) ==
                ncclSuccess,
            "AG");
    }
    CHECK(ncclGroupEnd() == ncclSuccess, "nested end");
    CHECK(ncclGroupEnd() == ncclSuccess, "end");
    for (int i = 0; i < L; ++i) CHECK(sync(streams[i]) == CUDA_SUCCESS, "stream %d", i);
    for (int i = 0; i < L; ++i) {
      for (size_t j = 0; j < C; ++j) {
        CHECK(out[i][j] == static_cast<int64_t>(j) * n * (n + 1) / 2, "AR[%d][%zu]", i, j);
        for (int r = 0; r < n; ++r) {
          CHECK(ag[i][static_cast<size_t>(r) * C + j] == static_cast<int64_t>(j) * (r + 1), "AG");
        }
      }
    }
  }
  for (ncclComm_t c : comms) finalize_destroy(c);
  // Blocking init, one thread per rank; then one all-reduce per thread.
  ncclUniqueId id2 = shared_id("group-blocking");
  std::vector<std::thread> threads;
  std::vector<int> ok(L, 0);
  for (int i = 0; i < L; ++i) {
    threads.emplace_back([&, i] {
      ncclComm_t c = init_rank(id2, n, g_proc * L + i, 1);
      CHECK(async_state(c) == ncclSuccess, "blocking init not settled");
      CUstream st = new_stream();
      DevVec<float> v(333, static_cast<float>(g_proc * L + i));
      CHECK(ncclAllReduce(v.data(), v.data(), v.size(), ncclFloat32, ncclMax, c, st) == ncclSuccess,
            "AR");
      CHECK(sync(st) == CUDA_SUCCESS, "stream");
      for (float x : v) CHECK(x == static_cast<float>(n - 1), "max %f", x);
      finalize_destroy(c);
      ok[static_cast<size_t>(i)] = 1;
    });
  }
  for (auto& t : threads) t.join();
  for (int x : ok) CHECK(x == 1, "thread failed");
  std::printf("[proc %d] group calls correct\n", g_proc);
}

// PTCSI_NCCL_INPROGRESS=1: init, collectives and ncclGroupEnd answer
// ncclInProgress; the comm settles to ncclSuccess after a few ms.
void mode_settle() {
  const int n = g_nprocs, me = g_proc;
  ncclUniqueId id = shared_id("settle");
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t c = nullptr;
  CHECK(ncclCommInitRankConfig(&c, n, id, me, &config) == ncclInProgress, "init");
  CHECK(async_state(c) == ncclInProgress, "init settled at once");
  CHECK(settle(c) == ncclSuccess, "init");
  CUstream s = new_stream();
  DevVec<int32_t> v(100, me + 1);
  auto t = Clock::now();
  CHECK(ncclAllReduce(v.data(), v.data(), v.size(), ncclInt32, ncclSum, c, s) == ncclInProgress,
        "AR");
  CHECK(async_state(c) == ncclInProgress, "AR settled at once");
  CHECK(settle(c) == ncclSuccess, "AR settle");
  CHECK(since(t) >= 0.004, "settled after %.4f s", since(t));
  CHECK(ncclGroupStart() == ncclSuccess, "start");
  ncclResult_t r = ncclAllReduce(v.data(), v.data(), v.size(), ncclInt32, ncclSum, c, s);
  CHECK(r == ncclInProgress || r == ncclSuccess, "AR in group %d", r);
  CHECK(ncclGroupEnd() == ncclInProgress, "group end");
  CHECK(async_state(c) == ncclInProgress, "group settled at once");
  CHECK(settle(c) == ncclSuccess, "group settle");
  CHECK(sync(s) == CUDA_SUCCESS, "stream");
  const int sum = n * (n + 1) / 2;
  for (int32_t x : v) CHECK(x == sum * n, "value %d", x);
  finalize_destroy(c);
  std::printf("[proc %d] in-progress settling correct\n", me);
}

// Ranks disagree (variant: count, type, op, root, kind): every rank's
// work fails, the async error is ncclInvalidUsage with a message.
void mode_mismatch(const std::string& what) {
  const int n = g_nprocs, me = g_proc;
  ncclComm_t c = init_rank(shared_id("mismatch"), n, me);
  CUstream s = new_stream();
  DevVec<float> buf(64 * static_cast<size_t>(n), 1.0f);
  // A matching one first: the comm works.
  CHECK(ncclAllReduce(buf.data(), buf.data(), 16, ncclFloat32, ncclSum, c, s) == ncclSuccess, "AR");
  CHECK(sync(s) == CUDA_SUCCESS, "first all-reduce");
  const bool odd = me == n - 1;
  ncclResult_t r;
  if (what == "count") {
    r = ncclAllReduce(buf.data(), buf.data(), odd ? 17 : 16, ncclFloat32, ncclSum, c, s);
  } else if (what == "datatype") {
    r = ncclAllReduce(buf.data(), buf.data(), 16, odd ? ncclInt32 : ncclFloat32, ncclSum, c, s);
  } else if (what == "op") {
    r = ncclAllReduce(buf.data(), buf.data(), 16, ncclFloat32, odd ? ncclMax : ncclSum, c, s);
  } else if (what == "root") {
    r = ncclBroadcast(buf.data(), buf.data(), 16, ncclFloat32, odd ? 1 : 0, c, s);
  } else {  // kind
    r = odd ? ncclAllGather(buf.data(), buf.data(), 16, ncclFloat32, c, s)
            : ncclAllReduce(buf.data(), buf.data(), 16, ncclFloat32, ncclSum, c, s);
  }
  CHECK(r == ncclSuccess, "enqueue %d", r);
  CUresult e = sync(s, 20);
  CHECK(e != CUDA_SUCCESS, "a mismatched collective succeeded");
  ncclResult_t st = async_state(c);
  CHECK(st == ncclInvalidUsage, "async error %d", st);
  const char* text = ncclGetLastError(c);
  CHECK(std::strstr(text, what.c_str()) != nullptr, "last error does not say %s: %s", what.c_str(),
        text);
  // Later calls fail at once with the comm's error.
  CHECK(ncclAllReduce(buf.data(), buf.data(), 16, ncclFloat32, ncclSum, c, s) == ncclInvalidUsage,
        "call after the error");
  CHECK(ncclCommAbort(c) == ncclSuccess, "abort");
  std::printf("[proc %d] mismatch (%s) detected\n", me, what.c_str());
}

// The last process never calls the collective; process 0 aborts while its
// work waits on the stream: the work must end (with an error) within a few
// ms. Other waiting ranks are NOT woken by that (as with NCCL) until they
// abort themselves.
void mode_abort() {
  const int n = g_nprocs, me = g_proc;
  ncclComm_t c = init_rank(shared_id("abort"), n, me);
  CUstream s = new_stream();
  DevVec<float> buf(1000, 1.0f);
  const bool idle = me == n - 1;
  if (!idle) {
    CHECK(ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, c, s) ==
              ncclSuccess,
          "AR");
  }
  Marker m(s);
  sleep_ms(300);
  if (!idle) CHECK(m.query() == CUDA_ERROR_NOT_READY, "finished without every rank: %d", m.query());
  if (me == 0) {
    std::thread aborter([&] { CHECK(ncclCommAbort(c) == ncclSuccess, "abort"); });
    aborter.join();
    auto t = Clock::now();
    CUresult r = m.wait(5);
    double took = since(t);
    CHECK(r == CUDA_ERROR_LAUNCH_FAILED, "aborted work ended with %d", r);
    CHECK(took < 0.1, "the aborted work took %.3f s to notice", took);
    ncclResult_t st;
    CHECK(ncclCommGetAsyncError(c, &st) == ncclInvalidArgument, "aborted comm still valid");
    CHECK(
        ncclAllReduce(buf.data(), buf.data(), 1, ncclFloat32, ncclSum, c, s) == ncclInvalidArgument,
        "use after abort");
    CHECK(sync(new_stream()) == CUDA_SUCCESS, "a fresh stream works");
    std::printf("[proc 0] abort ended the waiting work in %.4f s\n", took);
    flag("aborted0");
  } else {
    wait_flag("aborted0");
    sleep_ms(200);
    if (!idle) {
      CHECK(m.query() == CUDA_ERROR_NOT_READY, "a peer's abort woke this rank: %d", m.query());
    }
    CHECK(async_state(c) == ncclSuccess, "a peer's abort changed this rank's state");
    CHECK(ncclCommAbort(c) == ncclSuccess, "abort");
    CHECK(idle ? m.wait(5) == CUDA_SUCCESS : m.wait(5) == CUDA_ERROR_LAUNCH_FAILED, "after abort");
  }
}

// PTCSI_NCCL_NEVER_JOIN=<rank>: nobody's init completes; abort cleans up.
void mode_never_join() {
  const int n = g_nprocs, me = g_proc;
  ncclUniqueId id = shared_id("never");
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t c = nullptr;
  CHECK(ncclCommInitRankConfig(&c, n, id, me, &config) == ncclInProgress, "init");
  auto t = Clock::now();
  while (since(t) < 0.4) {
    CHECK(async_state(c) == ncclInProgress, "init completed");
    sleep_ms(5);
  }
  flag("waited" + std::to_string(me));
  for (int r = 0; r < n; ++r) wait_flag("waited" + std::to_string(r));
  CHECK(ncclCommAbort(c) == ncclSuccess, "abort");
  std::printf("[proc %d] init stayed in progress\n", me);
}

// PTCSI_NCCL_ASYNC_ERROR_AT=2[:rank] (rank -1 = every rank): the second
// collective fails on that rank; the others wait until aborted.
void mode_error_at(int bad_rank) {
  const int n = g_nprocs, me = g_proc;
  ncclComm_t c = init_rank(shared_id("errorat"), n, me);
  CUstream s = new_stream();
  DevVec<int32_t> v(100, 1);
  CHECK(ncclAllReduce(v.data(), v.data(), v.size(), ncclInt32, ncclSum, c, s) == ncclSuccess,
        "AR1");
  CHECK(sync(s) == CUDA_SUCCESS, "the first collective");
  CHECK(ncclAllReduce(v.data(), v.data(), v.size(), ncclInt32, ncclSum, c, s) == ncclSuccess,
        "AR2");
  Marker m(s);
  if (bad_rank < 0 || bad_rank == me) {
    CHECK(m.wait(10) == CUDA_ERROR_LAUNCH_FAILED, "the failing work");
    CHECK(async_state(c) == ncclSystemError, "async error %d", async_state(c));
    CHECK(std::strstr(ncclGetLastError(c), "PTCSI_NCCL_ASYNC_ERROR_AT") != nullptr, "text: %s",
          ncclGetLastError(c));
    flag("failed");
  } else {
    wait_flag("failed");
    sleep_ms(200);
    CHECK(m.query() == CUDA_ERROR_NOT_READY, "a peer's failure completed this rank's work");
    CHECK(async_state(c) == ncclSuccess, "state");
  }
  CHECK(ncclCommAbort(c) == ncclSuccess, "abort");
  CHECK(m.wait(5) != CUDA_ERROR_NOT_READY, "still waiting");
  std::printf("[proc %d] injected error seen\n", me);
}

// PTCSI_NCCL_HANG_AT=1:<rank>: nobody finishes until aborted.
void mode_hang() {
  const int n = g_nprocs, me = g_proc;
  ncclComm_t c = init_rank(shared_id("hang"), n, me);
  CUstream s = new_stream();
  DevVec<int32_t> v(100, 1);
  CHECK(ncclAllReduce(v.data(), v.data(), v.size(), ncclInt32, ncclSum, c, s) == ncclSuccess, "AR");
  Marker m(s);
  sleep_ms(300);
  CHECK(m.query() == CUDA_ERROR_NOT_READY, "finished despite a hung rank");
  CHECK(async_state(c) == ncclSuccess, "state");
  CHECK(ncclCommAbort(c) == ncclSuccess, "abort");
  auto t = Clock::now();
  CHECK(m.wait(5) == CUDA_ERROR_LAUNCH_FAILED, "aborted work");
  CHECK(since(t) < 0.1, "abort took %.3f s", since(t));
  std::printf("[proc %d] hung collective ended by abort\n", me);
}

// Init misuse by the last process: nranks disagree, rank out of range,
// rank claimed twice. Every rank's init must fail with ncclInvalidUsage.
void mode_badinit(const std::string& what) {
  const int n = g_nprocs, me = g_proc;
  ncclUniqueId id = shared_id("bad");
  const bool bad = me == n - 1;
  int nranks = n, rank = me;
  if (bad && what == "nranks") nranks = n + 1;
  if (bad && what == "range") rank = n;
  if (bad && what == "twice") rank = 0;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t c = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&c, nranks, id, rank, &config);
  if (r == ncclInProgress) {
    r = settle(c, 10);
  }
  CHECK(r == ncclInvalidUsage, "init ended with %d (%s)", r, ncclGetLastError(nullptr));
  std::printf("[proc %d] %s\n", me, ncclGetLastError(nullptr));
  // Abort removes the segment's name: a rank arriving after that would
  // start afresh and wait (as with NCCL, until aborted). Abort once all saw.
  flag("seen" + std::to_string(me));
  for (int r = 0; r < n; ++r) wait_flag("seen" + std::to_string(r));
  if (c != nullptr) CHECK(ncclCommAbort(c) == ncclSuccess, "abort");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: nccl_test <mode> <nprocs> <proc> <dir> [arg]\n");
    return 2;
  }
  const std::string mode = argv[1];
  g_nprocs = std::atoi(argv[2]);
  g_proc = std::atoi(argv[3]);
  g_dir = argv[4];
  const std::string arg = argc > 5 ? argv[5] : "";
  if (mode == "all") {
    mode_all(arg.empty() ? 37 : static_cast<size_t>(std::atoi(arg.c_str())));
  } else if (mode == "big") {
    mode_big();
  } else if (mode == "group") {
    mode_group();
  } else if (mode == "settle") {
    mode_settle();
  } else if (mode == "mismatch") {
    mode_mismatch(arg);
  } else if (mode == "abort") {
    mode_abort();
  } else if (mode == "never_join") {
    mode_never_join();
  } else if (mode == "error_at") {
    mode_error_at(arg.empty() ? -1 : std::atoi(arg.c_str()));
  } else if (mode == "hang") {
    mode_hang();
  } else if (mode == "badinit") {
    mode_badinit(arg);
  } else {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  return 0;
}
