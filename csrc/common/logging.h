// Minimal leveled logging to stderr, prefixed with the rank when known.
#pragma once

#include <string>

#include "common/error.h"

namespace pytfcomm {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

bool log_enabled(LogLevel level);
void log_message(LogLevel level, const std::string& msg);
// Rank shown in the prefix of every later line of this process (-1: none).
void set_log_rank(int rank);

}  // namespace pytfcomm

#define PTC_LOG(level, ...)                                                                   \
  do {                                                                                        \
    if (::pytfcomm::log_enabled(::pytfcomm::LogLevel::level))                                 \
      ::pytfcomm::log_message(::pytfcomm::LogLevel::level, ::pytfcomm::str_cat(__VA_ARGS__)); \
  } while (0)
