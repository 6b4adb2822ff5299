#include "nccl/knobs.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace ptcsi_nccl {
namespace {

bool parse_u64(const std::string& s, uint64_t* v) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return false;
  *v = std::strtoull(s.c_str(), nullptr, 10);
  return true;
}

// "<n>" or "<n>:<rank>"
void read_at(const char* name, uint64_t* at, int* rank) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return;
  std::string s(raw);
  std::string n = s, r;
  size_t colon = s.find(':');
  if (colon != std::string::npos) {
    n = s.substr(0, colon);
    r = s.substr(colon + 1);
  }
  uint64_t nv = 0, rv = 0;
  if (!parse_u64(n, &nv) || nv == 0 || (!r.empty() && !parse_u64(r, &rv)) ||
      (colon != std::string::npos && r.empty())) {
    std::fprintf(stderr, "NCCL stand-in: ignoring %s=%s (want <n>[:<rank>], n >= 1)\n", name, raw);
    return;
  }
  *at = nv;
  *rank = r.empty() ? -1 : static_cast<int>(rv);
}

}  // namespace

Knobs read_knobs() {
  Knobs k;
  if (const char* v = std::getenv("PTCSI_NCCL_NEVER_JOIN"); v != nullptr && *v != '\0') {
    uint64_t r = 0;
    if (parse_u64(v, &r)) {
      k.never_join = static_cast<int>(r);
    } else {
      std::fprintf(stderr, "NCCL stand-in: ignoring PTCSI_NCCL_NEVER_JOIN=%s\n", v);
    }
  }
  if (const char* v = std::getenv("PTCSI_NCCL_SHRINK_FAIL"); v != nullptr && *v != '\0') {
    uint64_t r = 0;
    if (parse_u64(v, &r)) {
      k.shrink_fail = static_cast<int>(r);
    } else {
      std::fprintf(stderr, "NCCL stand-in: ignoring PTCSI_NCCL_SHRINK_FAIL=%s\n", v);
    }
  }
  read_at("PTCSI_NCCL_ASYNC_ERROR_AT", &k.error_at, &k.error_rank);
  read_at("PTCSI_NCCL_HANG_AT", &k.hang_at, &k.hang_rank);
  read_at("PTCSI_NCCL_STOP_AT", &k.stop_at, &k.stop_rank);
  if (const char* v = std::getenv("PTCSI_NCCL_INPROGRESS")) k.in_progress = std::string(v) == "1";
  if (const char* v = std::getenv("PTCSI_NCCL_LAUNCH_WAITS")) {
    k.launch_waits = std::string(v) == "1";
  }
  if (const char* v = std::getenv("PTCSI_NCCL_SLOT_BYTES"); v != nullptr && *v != '\0') {
    uint64_t b = 0;
    if (parse_u64(v, &b) && b >= 64) {
      k.slot_bytes = static_cast<size_t>(b) / 64 * 64;
    } else {
      std::fprintf(stderr, "NCCL stand-in: ignoring PTCSI_NCCL_SLOT_BYTES=%s (>= 64)\n", v);
    }
  }
  return k;
}

}  // namespace ptcsi_nccl
