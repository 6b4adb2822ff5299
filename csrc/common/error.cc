#include "common/error.h"

namespace pytfcomm {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInternal:
      return "internal";
    case ErrorKind::kInvalidArgument:
      return "invalid argument";
    case ErrorKind::kConfig:
      return "configuration";
    case ErrorKind::kPeerLost:
      return "peer lost";
    case ErrorKind::kTimeout:
      return "timeout";
    case ErrorKind::kMismatch:
      return "mismatch";
    case ErrorKind::kAuth:
      return "authentication";
    case ErrorKind::kInterrupted:
      return "interrupted";
    case ErrorKind::kClosed:
      return "closed";
  }
  return "unknown";
}

}  // namespace pytfcomm
