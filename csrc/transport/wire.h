// Byte layouts that cross the network. Little-endian hosts only (checked at
// build time); every field is validated on receipt before it is used.
#pragma once

#include <cstdint>

#include "transport/transport.h"

namespace pytfcomm::wire {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "wire format assumes little endian");

constexpr uint32_t kProtocolVersion = 1;
constexpr uint64_t kHelloMagic = 0x314d4d4f43465450ULL;  // "PTFCOMM1"
constexpr uint32_t kDataMagic = 0x41544144;              // "DATA"
constexpr uint32_t kAbortMagic = 0x54524241;             // "ABRT"
constexpr uint32_t kMaxAbortReason = 4096;

// Precedes every message on an established connection.
struct FrameHeader {
  uint32_t magic;  // kDataMagic or kAbortMagic
  uint32_t reserved;
  uint64_t nbytes;  // payload length that follows
  transport::MessageMeta meta;
};
static_assert(sizeof(FrameHeader) == 40, "FrameHeader layout is the wire format");

enum class HelloPurpose : uint32_t {
  kJoin = 1,  // a rank registering with rank 0's rendezvous
  kData = 2,  // a rank opening its data connection to a lower rank
};

constexpr int kMaxHost = 256;
constexpr int kMaxHostId = 128;

// First bytes a connecting rank sends.
struct Hello {
  uint64_t magic;  // kHelloMagic
  uint32_t version;
  uint32_t purpose;  // HelloPurpose
  int32_t rank;
  int32_t size;
  uint32_t listen_port;
  uint32_t flags;
  uint8_t nonce[32];           // for the authentication handshake
  char listen_host[kMaxHost];  // NUL-terminated
  char host_id[kMaxHostId];    // NUL-terminated
};

// Rank 0's answer to a kJoin: status, then `size` PeerEntry records.
struct JoinReply {
  uint64_t magic;  // kHelloMagic
  int32_t status;  // 0 ok, otherwise an error message of `message_len` bytes follows
  int32_t size;
  uint32_t message_len;
  uint32_t reserved;
};

struct PeerEntry {
  int32_t rank;
  uint32_t port;
  char host[kMaxHost];
  char host_id[kMaxHostId];
};

}  // namespace pytfcomm::wire
