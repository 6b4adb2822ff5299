// Error types of the core. Every error carries the [file:line] where it was
// raised; the bindings map each kind to a pytfcomm.CommError subclass and the
// TF kernels to a tf.errors status, both by PTC_ERROR_KINDS (docs/errors.md).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

#include "common/code_table.h"

namespace pytfcomm {

// X(enumerator, wire value, name, Python class, TF status): one row per kind,
// read by the messages (the name), the bindings' exception translator (the
// class in pytfcomm/errors.py) and the TF kernels (absl::StatusCode::k<status>).
// docs/errors.md is this table in prose; tests/project/test_error_table.py compares
// the two. Wire values (+1) travel in ABRT frames: never renumber them.
//   kInternal:        a bug or an unexpected system failure
//   kInvalidArgument: the caller passed something unusable
//   kConfig:          bad configuration (env, addresses, cluster spec)
//   kPeerLost:        a peer closed its connection or aborted
//   kTimeout:         a deadline passed while waiting on a peer
//   kMismatch:        ranks disagree on a collective's shape/dtype/op/order
//   kAuth:            a handshake failed authentication
//   kClosed:          the communicator was closed or has failed before
//   kInterrupted:     the user interrupted a wait (Ctrl-C); the bindings re-raise
//                     the Python exception the signal handler raised, if it is
//                     on the calling thread, else the class below
#define PTC_ERROR_KINDS(X)                                                          \
  X(kInternal, 0, "internal", CommError, Internal)                                  \
  X(kInvalidArgument, 1, "invalid argument", InvalidArgumentError, InvalidArgument) \
  X(kConfig, 2, "configuration", ConfigError, InvalidArgument)                      \
  X(kPeerLost, 3, "peer lost", PeerLostError, Unavailable)                          \
  X(kTimeout, 4, "timeout", CommTimeoutError, DeadlineExceeded)                     \
  X(kMismatch, 5, "mismatch", MismatchError, FailedPrecondition)                    \
  X(kAuth, 6, "authentication", AuthenticationError, PermissionDenied)              \
  X(kClosed, 7, "closed", CommClosedError, FailedPrecondition)                      \
  X(kInterrupted, 8, "interrupted", CommClosedError, Cancelled)

enum class ErrorKind { PTC_ERROR_KINDS(PTC_CODE_ENUMERATOR) };
PTC_CODE_TABLE(ErrorKind, PTC_ERROR_KINDS);

static_assert(codes_are_dense<ErrorKind>(), "kErrorClasses is indexed by kind");

inline const char* error_kind_name(ErrorKind kind) { return code_name(kind, "unknown"); }

// Where a kind surfaces: its Python class and its TF status code, by name.
struct ErrorClass {
  ErrorKind kind;
  const char* id;         // "kAuth": the enumerator, as docs/errors.md names it
  const char* python;     // a class of pytfcomm/errors.py
  const char* tf_status;  // absl::StatusCode::k<tf_status>, tf.errors.<tf_status>Error
};
#define PTC_ERROR_CLASS_ROW(id, value, name, python, tf) {ErrorKind::id, #id, #python, #tf},
inline constexpr ErrorClass kErrorClasses[] = {PTC_ERROR_KINDS(PTC_ERROR_CLASS_ROW)};
#undef PTC_ERROR_CLASS_ROW
inline const ErrorClass& error_class(ErrorKind kind) {
  return kErrorClasses[static_cast<size_t>(kind)];
}

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

// Throws an E (Error or a subclass a caller catches apart) of `kind`, its
// message ending in [file:line].
template <typename E, typename... Args>
[[noreturn]] void throw_as(ErrorKind kind, const char* file, int line, const Args&... args) {
  const char* base = file;
  for (const char* p = file; *p; ++p) {
    if (*p == '/') base = p + 1;
  }
  throw E(kind, str_cat(args..., " [", base, ":", line, "]"));
}

template <typename... Args>
[[noreturn]] void throw_error(ErrorKind kind, const char* file, int line, const Args&... args) {
  throw_as<Error>(kind, file, line, args...);
}

}  // namespace pytfcomm

#define PTC_THROW(kind, ...) \
  ::pytfcomm::throw_error(::pytfcomm::ErrorKind::kind, __FILE__, __LINE__, __VA_ARGS__)
#define PTC_THROW_AS(type, kind, ...) \
  ::pytfcomm::throw_as<type>(::pytfcomm::ErrorKind::kind, __FILE__, __LINE__, __VA_ARGS__)

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
