// Layout of a rank's shared-memory segment: a header with the rank's
// doorbell (a futex word), then one single-producer/single-consumer byte
// ring per local peer, carrying everything that peer sends to this rank,
// then (when oneshot_bytes > 0) the rank's one-shot area: two buffers this
// rank publishes small collective inputs in, for every local peer to read.
// The receiving rank creates the segment; senders map it too.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace pytfcomm::shm {

constexpr uint64_t kSegmentMagic = 0x314d48534d4f4350ULL;  // "PCOMSHM1"
constexpr size_t kCacheLine = 64;
constexpr size_t kHeaderBytes = 4096;
constexpr size_t kRingCtlBytes = 4096;  // keeps each ring's data page-aligned

static_assert(std::atomic<uint64_t>::is_always_lock_free, "rings need lock-free 64-bit atomics");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "doorbells need lock-free atomics");

struct SegmentHeader {
  uint64_t magic;
  uint32_t num_rings;
  uint32_t oneshot_bytes;  // capacity of each one-shot buffer (0: no one-shot area)
  uint64_t ring_bytes;
  // Bumped by anyone who gave the owner something to do (data in, space out)
  // while it said it was sleeping; the owner FUTEX_WAITs on it.
  alignas(kCacheLine) std::atomic<uint32_t> doorbell;
  // Set by the owner just before it sleeps; writers wake it only then.
  alignas(kCacheLine) std::atomic<uint32_t> sleeping;
};
static_assert(sizeof(SegmentHeader) <= kHeaderBytes, "segment header too large");

// A producer's last words (docs/reliability.md): when it gives up, it writes
// its reason here rather than into the ring, which may be full of data or
// end in a half-written frame: text, bytes and flags first, then
// `published` = 1 with a release store; then it closes its liveness socket.
// The consumer (the segment's owner) reads it when the ring closes or an idle
// pair wakes it. Written once, by the ring's one producer; the reader trusts
// no field (bytes <= kNoteBytes, flags known, else the note is ignored).
constexpr size_t kNoteBytes = 3072;
struct AbortNote {
  std::atomic<uint32_t> published;
  uint32_t flags;  // wire::AbortFlags
  uint32_t bytes;
  char text[kNoteBytes];
};

// head: bytes ever written (producer only writes it); tail: bytes ever read
// (consumer only writes it); released: payload bytes the consumer has copied
// straight out of the producer's memory (see stream.h). On separate lines so
// each side owns its own.
struct RingCtl {
  alignas(kCacheLine) std::atomic<uint64_t> head;
  alignas(kCacheLine) std::atomic<uint64_t> tail;
  alignas(kCacheLine) std::atomic<uint64_t> released;
  alignas(kCacheLine) AbortNote note;
};

// The ring carries records, 8-byte aligned: a tag (payload length in the low
// 32 bits, kByReference in bit 32), then the payload bytes padded to 8, or for
// a by-reference record the payload's address in the producer's memory.
constexpr uint64_t kByReference = uint64_t{1} << 32;
constexpr size_t kTagBytes = 8;
inline uint64_t pad8(uint64_t n) { return (n + 7) & ~uint64_t{7}; }
static_assert(sizeof(RingCtl) <= kRingCtlBytes, "ring control too large");

// The one-shot area's control block. Only the owner writes it: the buffer
// (seq & 1), then the slot's metadata, then `published` = seq (release).
// Readers of exchange seq wait for published >= seq (acquire). Two buffers
// suffice: the owner publishes seq + 2 only after every peer published
// seq + 1, which each does only after it finished reading seq.
struct OneShotSlot {
  unsigned char meta[24];  // transport::MessageMeta, as on the wire
  uint64_t nbytes;
};
struct OneShotCtl {
  alignas(kCacheLine) std::atomic<uint64_t> published;
  alignas(kCacheLine) OneShotSlot slot[2];
};
constexpr size_t kOneShotCtlBytes = 4096;
// PYTFCOMM_ONESHOT_BYTES (at most 1 MiB) plus room for a negotiation record's table.
constexpr uint32_t kMaxOneShotBytes = (1u << 20) + (64u << 10);
static_assert(sizeof(OneShotCtl) <= kOneShotCtlBytes, "one-shot control too large");

inline size_t ring_offset(size_t index, size_t ring_bytes) {
  return kHeaderBytes + index * (kRingCtlBytes + ring_bytes);
}
inline size_t oneshot_offset(size_t num_rings, size_t ring_bytes) {
  return ring_offset(num_rings, ring_bytes);
}
inline size_t segment_bytes(size_t num_rings, size_t ring_bytes, size_t oneshot_bytes) {
  return oneshot_offset(num_rings, ring_bytes) +
         (oneshot_bytes ? kOneShotCtlBytes + 2 * oneshot_bytes : 0);
}

}  // namespace pytfcomm::shm
