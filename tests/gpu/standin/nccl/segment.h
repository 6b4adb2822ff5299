// The POSIX shared-memory segment the ranks of one stand-in communicator
// meet in (one job: its layout, and creating / joining / unlinking it).
//
// Layout: Header | RankCtl[nranks] | data slots [nranks][2][slot_bytes].
// Every field another process reads is a lock-free std::atomic (address-free,
// so valid across mappings) or written before a release store it is read
// after.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace ptcsi_nccl {

constexpr uint64_t kSegmentMagic = 0x314d534953435450ull;  // "PTCSISM1"
constexpr int kMaxRanks = 512;
constexpr size_t kDefaultSlotBytes = size_t{1} << 20;

// What a rank says its collective is; compared across ranks at every call.
struct Desc {
  uint64_t seq;
  int32_t kind;
  int32_t dtype;
  int32_t op;    // -1 where the kind has none
  int32_t root;  // -1 where the kind has none
  uint64_t count;
};

struct alignas(64) RankCtl {
  std::atomic<uint64_t> arrived;   // the last barrier step this rank reached
  std::atomic<uint64_t> launched;  // its last launched call (PTCSI_NCCL_LAUNCH_WAITS)
  Desc desc[2];                    // by barrier-step parity
};

struct Header {
  std::atomic<uint64_t> magic;  // stored last by the creator (release)
  int32_t nranks;
  uint32_t pad;
  uint64_t slot_bytes;
  std::atomic<int32_t> joined;  // ranks whose init completed their part
  std::atomic<int32_t> poison;  // an init-time misuse: every rank's init fails
  char poison_msg[256];
  std::atomic<uint8_t> taken[kMaxRanks];
};

class Segment {
 public:
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment();

  // Creates the segment `name` for nranks (whoever comes first; the O_EXCL
  // race is handled) or opens the existing one and waits (bounded, and
  // abandoned when *stop turns true) until its creator finished it. On
  // failure returns null with *err set. *nranks_seen is the segment's rank
  // count (which may differ from nranks: the caller reports that).
  static Segment* open(const std::string& name, int nranks, size_t slot_bytes,
                       const std::atomic<bool>* stop, std::string* err, int* nranks_seen);

  Header* header() const { return reinterpret_cast<Header*>(base_); }
  RankCtl* ctl(int rank) const;
  char* slot(int rank, uint64_t parity) const;
  size_t slot_bytes() const { return slot_bytes_; }
  int nranks() const { return nranks_; }
  // Marks every rank's init as failed with msg (first message wins).
  void poison(const std::string& msg);
  // Removes the name (idempotent); the mapping stays valid.
  void unlink();

 private:
  Segment() = default;
  std::string name_;
  char* base_ = nullptr;
  size_t bytes_ = 0;
  size_t slot_bytes_ = 0;
  int nranks_ = 0;
  std::atomic<bool> unlinked_{false};
};

// "/ptcsi-nccl-<32 hex digits>" from the id's bytes.
std::string segment_name(const void* id, size_t bytes);

}  // namespace ptcsi_nccl
