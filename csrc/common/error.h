// Error types of the core. Every error carries the [file:line] where it was
// raised; the bindings map each kind to a pytfcomm.CommError subclass and the
// TF kernels to a tf.errors status (see docs/errors.md).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace pytfcomm {

enum class ErrorKind {
  kInternal,         // a bug or an unexpected system failure
  kInvalidArgument,  // the caller passed something unusable
  kConfig,           // bad configuration (env, addresses, cluster spec)
  kPeerLost,         // a peer closed its connection or aborted
  kTimeout,          // a deadline passed while waiting on a peer
  kMismatch,         // ranks disagree on a collective's shape/dtype/op/order
  kAuth,             // a handshake failed authentication
  kClosed,           // the communicator was closed or has failed before
  kInterrupted,      // the user interrupted a wait (Ctrl-C); the bindings re-raise
                     // the Python exception the signal handler raised
};

const char* error_kind_name(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& msg) : std::runtime_error(msg), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

namespace detail {
inline void append(std::ostringstream&) {}
template <typename T, typename... Rest>
void append(std::ostringstream& os, const T& v, const Rest&... rest) {
  os << v;
  append(os, rest...);
}
}  // namespace detail

template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  detail::append(os, args...);
  return os.str();
}

template <typename... Args>
[[noreturn]] void throw_error(ErrorKind kind, const char* file, int line, const Args&... args) {
  const char* base = file;
  for (const char* p = file; *p; ++p) {
    if (*p == '/') base = p + 1;
  }
  throw Error(kind, str_cat(args..., " [", base, ":", line, "]"));
}

}  // namespace pytfcomm

#define PTC_THROW(kind, ...) \
  ::pytfcomm::throw_error(::pytfcomm::ErrorKind::kind, __FILE__, __LINE__, __VA_ARGS__)

// Invariant check: a failure is a bug in pytfcomm, reported as kInternal.
#define PTC_ENFORCE(cond, ...)                                                              \
  do {                                                                                      \
    if (!(cond)) PTC_THROW(kInternal, "internal error: ", #cond, " failed: ", __VA_ARGS__); \
  } while (0)

// Argument check: a failure is the caller's mistake, reported as kInvalidArgument.
#define PTC_CHECK_ARG(cond, ...)                           \
  do {                                                     \
    if (!(cond)) PTC_THROW(kInvalidArgument, __VA_ARGS__); \
  } while (0)
