#include "common/param.h"

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include "common/error.h"

namespace pytfcomm {
namespace {

double env_double(const char* name, double dflt, double lo, double hi, const char* unit) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return dflt;
  char* end = nullptr;
  errno = 0;
  double x = std::strtod(v, &end);
  if (errno != 0 || end == v || *end != '\0' || !(x >= lo && x <= hi)) {
    PTC_THROW(kConfig, name, "='", v, "' is not valid: expected a number of ", unit, " in [", lo,
              ", ", hi, "]; unset it to use the default ", dflt);
  }
  return x;
}

int64_t env_int(const char* name, int64_t dflt, int64_t lo, int64_t hi, const char* unit) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return dflt;
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || x < lo || x > hi) {
    PTC_THROW(kConfig, name, "='", v, "' is not valid: expected an integer number of ", unit,
              " in [", lo, ", ", hi, "]; unset it to use the default ", dflt);
  }
  return x;
}

Params load() {
  Params p;
  p.timeout_s = env_double("PYTFCOMM_TIMEOUT", 600.0, 0.001, 1e7, "seconds");
  p.connect_timeout_s = env_double("PYTFCOMM_CONNECT_TIMEOUT", 120.0, 0.01, 1e6, "seconds");
  p.spin_us = env_int("PYTFCOMM_SPIN_US", -1, -1, 10'000'000, "microseconds (-1 = auto)");
  p.segment_bytes = env_int("PYTFCOMM_SEGMENT_BYTES", 256 << 10, 4096, 1LL << 30, "bytes");
  p.small_bytes = env_int("PYTFCOMM_SMALL_BYTES", 64 << 10, 0, 1LL << 30, "bytes");
  p.sockbuf_bytes = env_int("PYTFCOMM_SOCKET_BUFFER", 4 << 20, 0, 1LL << 30, "bytes");
  p.max_message_bytes = env_int("PYTFCOMM_MAX_MESSAGE", 1LL << 40, 1 << 20, 1LL << 50, "bytes");
  p.log_level = static_cast<int>(env_int("PYTFCOMM_LOG_LEVEL", 1, 0, 3, "levels"));
  const char* t = std::getenv("PYTFCOMM_TRANSPORT");
  p.transport = t && *t ? t : "auto";
  if (p.transport != "auto" && p.transport != "tcp" && p.transport != "shm") {
    PTC_THROW(kConfig, "PYTFCOMM_TRANSPORT='", p.transport,
              "' is not valid: expected auto, tcp or shm; unset it to use the default auto");
  }
  // 1 MiB: measured faster than 4 MiB from 16 KiB to 4 MiB messages (the ring
  // stays in cache) and still holds four 256 KiB pipeline segments.
  p.shm_ring_bytes = env_int("PYTFCOMM_SHM_RING_BYTES", 1 << 20, 4096, 1LL << 30, "bytes");
  if (p.shm_ring_bytes & (p.shm_ring_bytes - 1)) {
    PTC_THROW(kConfig, "PYTFCOMM_SHM_RING_BYTES=", p.shm_ring_bytes,
              " is not valid: expected a power of two; unset it to use the default ", 1 << 20);
  }
  // Off by default: on the VMs measured, pinning and walking the peer's pages cost as
  // much as the second copy it saves (PYTFCOMM_SHM_BYREF_BYTES=65536 to try it).
  p.shm_by_ref_bytes = env_int("PYTFCOMM_SHM_BYREF_BYTES", 0, 0, 1LL << 40, "bytes");
  // Jobs on one host: all-reduces up to this size publish their input once in
  // shared memory and every rank reduces all inputs itself (no messages).
  p.oneshot_bytes = env_int("PYTFCOMM_ONESHOT_BYTES", 64 << 10, 0, 1 << 20, "bytes (0 = off)");
  // Ranks on different hosts: several TCP connections per pair, bytes dealt
  // round-robin in stripes. It pays where one flow is capped by its window
  // or by one core's network processing (benchmarks/tcp_streams.py: 4
  // connections moved 16-64 MiB 1.5x faster over veth). 0 = auto: 4, fewer
  // in large jobs so that descriptors stay few (tcp_streams_for()).
  const char* ts = std::getenv("PYTFCOMM_TCP_STREAMS");
  p.tcp_streams = ts && std::string(ts) == "auto"
                      ? 0
                      : env_int("PYTFCOMM_TCP_STREAMS", 0, 1, 16, "connections (or auto)");
  p.tcp_stripe_bytes = env_int("PYTFCOMM_TCP_STRIPE_BYTES", 256 << 10, 4096, 1LL << 30, "bytes");
  // Tensor fusion (engine/fusion.h), defaults measured with benchmarks/fusion.py (N=2,
  // 200 tensors 4 KiB..1 MiB): 4 MiB buffers stay in cache between packing, reducing and
  // unpacking (1.6x the single array's time vs 2.0x with 64 MiB buffers); from 64 KiB a
  // tensor's own collective costs less than copying it in and out (1.2x with it).
  p.fusion_bytes = env_int("PYTFCOMM_FUSION_BYTES", 4 << 20, 1, 1LL << 40, "bytes");
  p.fusion_direct_bytes = env_int("PYTFCOMM_FUSION_DIRECT_BYTES", 64 << 10, 0, 1LL << 40, "bytes");
  p.fusion_cycle_ms = env_double("PYTFCOMM_FUSION_CYCLE_MS", 1.0, 0.0, 1e6, "milliseconds");
  const char* tl = std::getenv("PYTFCOMM_TIMELINE");
  p.timeline = tl ? tl : "";
  // Well below PYTFCOMM_TIMEOUT: a warning that names the late rank while
  // there is still time to look at it (docs/reliability.md).
  p.stall_warning_s = env_double("PYTFCOMM_STALL_WARNING", 60.0, 0.0, 1e7, "seconds (0 = off)");
  // Enough for the gradients of a ResNet-50-sized model several times over; a
  // step reuses the previous step's buffers (local/buffer_cache.h).
  p.tf_buffer_cache_bytes =
      env_int("PYTFCOMM_TF_BUFFER_CACHE", 1LL << 30, 0, 1LL << 50, "bytes (0 = off)");
  // About TF's coordination service (6-10 s of missed heartbeats), and far
  // below PYTFCOMM_TIMEOUT: a stopped peer is named within seconds.
  p.peer_timeout_s = env_double("PYTFCOMM_PEER_TIMEOUT", 10.0, 0.0, 1e7, "seconds (0 = off)");
  if (p.peer_timeout_s > 0 && p.peer_timeout_s < 0.2) {
    PTC_THROW(kConfig, "PYTFCOMM_PEER_TIMEOUT=", p.peer_timeout_s,
              " is not valid: use 0 (off) or at least 0.2 seconds; unset it to use the default 10");
  }
  return p;
}

// Every Params ever loaded stays allocated (and reachable, in `g_loaded`): a
// reference handed out before a reload must stay valid. Reloads happen once
// per new communicator, so this grows by a few hundred bytes per init().
std::atomic<const Params*> g_current{nullptr};
std::mutex g_load_mu;
auto* g_loaded = new std::vector<std::unique_ptr<const Params>>();

const Params* load_and_publish() {
  auto fresh = std::make_unique<const Params>(load());  // throws kConfig: nothing published
  g_current.store(fresh.get(), std::memory_order_release);
  g_loaded->push_back(std::move(fresh));
  return g_loaded->back().get();
}

}  // namespace

const Params& params() {
  const Params* p = g_current.load(std::memory_order_acquire);
  if (p) return *p;
  std::lock_guard<std::mutex> lock(g_load_mu);
  p = g_current.load(std::memory_order_acquire);
  return p ? *p : *load_and_publish();
}

void reload_params() {
  std::lock_guard<std::mutex> lock(g_load_mu);
  load_and_publish();
}

std::vector<std::pair<std::string, std::string>> describe_params() {
  const Params& p = params();
  return {
      {"PYTFCOMM_TIMEOUT", str_cat(p.timeout_s, " s")},
      {"PYTFCOMM_CONNECT_TIMEOUT", str_cat(p.connect_timeout_s, " s")},
      {"PYTFCOMM_SPIN_US", p.spin_us < 0 ? "auto" : str_cat(p.spin_us, " us")},
      {"PYTFCOMM_SEGMENT_BYTES", str_cat(p.segment_bytes)},
      {"PYTFCOMM_SMALL_BYTES", str_cat(p.small_bytes)},
      {"PYTFCOMM_SOCKET_BUFFER", str_cat(p.sockbuf_bytes)},
      {"PYTFCOMM_MAX_MESSAGE", str_cat(p.max_message_bytes)},
      {"PYTFCOMM_LOG_LEVEL", str_cat(p.log_level)},
      {"PYTFCOMM_TRANSPORT", p.transport},
      {"PYTFCOMM_SHM_RING_BYTES", str_cat(p.shm_ring_bytes)},
      {"PYTFCOMM_SHM_BYREF_BYTES", str_cat(p.shm_by_ref_bytes)},
      {"PYTFCOMM_ONESHOT_BYTES", str_cat(p.oneshot_bytes)},
      {"PYTFCOMM_TCP_STREAMS", p.tcp_streams == 0 ? std::string("auto") : str_cat(p.tcp_streams)},
      {"PYTFCOMM_TCP_STRIPE_BYTES", str_cat(p.tcp_stripe_bytes)},
      {"PYTFCOMM_FUSION_BYTES", str_cat(p.fusion_bytes)},
      {"PYTFCOMM_FUSION_DIRECT_BYTES", str_cat(p.fusion_direct_bytes)},
      {"PYTFCOMM_FUSION_CYCLE_MS", str_cat(p.fusion_cycle_ms, " ms")},
      {"PYTFCOMM_TIMELINE", p.timeline.empty() ? "off" : p.timeline},
      {"PYTFCOMM_STALL_WARNING", p.stall_warning_s > 0 ? str_cat(p.stall_warning_s, " s") : "off"},
      {"PYTFCOMM_TF_BUFFER_CACHE", str_cat(p.tf_buffer_cache_bytes)},
      {"PYTFCOMM_PEER_TIMEOUT", p.peer_timeout_s > 0 ? str_cat(p.peer_timeout_s, " s") : "off"},
  };
}

}  // namespace pytfcomm
