#include "common/logging.h"

#include <atomic>
#include <cstdio>

#include "common/param.h"

namespace pytfcomm {
namespace {
std::atomic<int> g_rank{-1};
}

bool log_enabled(LogLevel level) {
  int configured = 1;
  try {
    configured = params().log_level;
  } catch (const Error&) {
    // A bad PYTFCOMM_LOG_LEVEL is reported by whoever reads params() for real.
  }
  return static_cast<int>(level) <= configured;
}

void set_log_rank(int rank) { g_rank.store(rank); }

void log_message(LogLevel level, const std::string& msg) {
  static const char* kTags[] = {"ERROR", "WARN", "INFO", "DEBUG"};
  int rank = g_rank.load();
  if (rank >= 0) {
    std::fprintf(stderr, "[pytfcomm %s rank %d] %s\n", kTags[static_cast<int>(level)], rank,
                 msg.c_str());
  } else {
    std::fprintf(stderr, "[pytfcomm %s] %s\n", kTags[static_cast<int>(level)], msg.c_str());
  }
}

}  // namespace pytfcomm
