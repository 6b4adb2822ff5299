#include "nccl/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <new>
#include <thread>

namespace ptcsi_nccl {
namespace {

constexpr size_t kAlign = 64;
// How long a joiner waits for a creator that made the name but has not yet
// finished the segment (a few system calls; only a stopped process is slower).
constexpr auto kCreatorWait = std::chrono::seconds(30);

size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

size_t ctl_offset() { return round_up(sizeof(Header)); }

size_t data_offset(int nranks) {
  return round_up(ctl_offset() + sizeof(RankCtl) * static_cast<size_t>(nranks));
}

size_t total_bytes(int nranks, size_t slot) {
  return data_offset(nranks) + static_cast<size_t>(nranks) * 2 * slot;
}

std::string errno_text(const char* call, const std::string& name) {
  return std::string(call) + "(" + name + "): " + std::strerror(errno);
}

}  // namespace

std::string segment_name(const void* id, size_t bytes) {
  // Two FNV-1a variants (different offsets): 128 bits of name.
  const auto* p = static_cast<const unsigned char*>(id);
  uint64_t a = 0xcbf29ce484222325ull, b = 0x84222325cbf29ce4ull;
  for (size_t i = 0; i < bytes; ++i) {
    a = (a ^ p[i]) * 0x100000001b3ull;
    b = (b ^ p[bytes - 1 - i]) * 0x100000001b3ull;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), "/ptcsi-nccl-%016llx%016llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b));
  return buf;
}

Segment* Segment::open(const std::string& name, int nranks, size_t slot_bytes,
                       const std::atomic<bool>* stop, std::string* err, int* nranks_seen) {
  const auto deadline = std::chrono::steady_clock::now() + kCreatorWait;
  auto stopped = [&]() {
    if (stop != nullptr && stop->load()) {
      *err = "aborted while joining";
      return true;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      *err = "timed out waiting for the creator of " + name + " to finish it";
      return true;
    }
    return false;
  };
  for (;;) {
    if (stopped()) return nullptr;
    int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd >= 0) {
      // First to arrive: size it (zero-filled), fill the header, publish.
      const size_t total = total_bytes(nranks, slot_bytes);
      if (ftruncate(fd, static_cast<off_t>(total)) != 0) {
        *err = errno_text("ftruncate", name);
        close(fd);
        shm_unlink(name.c_str());
        return nullptr;
      }
      void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      close(fd);
      if (base == MAP_FAILED) {
        *err = errno_text("mmap", name);
        shm_unlink(name.c_str());
        return nullptr;
      }
      auto* h = static_cast<Header*>(base);
      h->nranks = nranks;
      h->slot_bytes = slot_bytes;
      h->magic.store(kSegmentMagic, std::memory_order_release);
      auto* s = new Segment();
      s->name_ = name;
      s->base_ = static_cast<char*>(base);
      s->bytes_ = total;
      s->slot_bytes_ = slot_bytes;
      s->nranks_ = nranks;
      *nranks_seen = nranks;
      return s;
    }
    if (errno != EEXIST) {
      *err = errno_text("shm_open", name);
      return nullptr;
    }
    fd = shm_open(name.c_str(), O_RDWR, 0);
    if (fd < 0) {
      if (errno == ENOENT) continue;  // unlinked in between: try to create it again
      *err = errno_text("shm_open", name);
      return nullptr;
    }
    // Someone else creates it: wait until it is sized and its header published.
    Header* h = nullptr;
    for (;;) {
      struct stat st;
      if (fstat(fd, &st) != 0) {
        *err = errno_text("fstat", name);
        close(fd);
        return nullptr;
      }
      if (h == nullptr && static_cast<size_t>(st.st_size) >= sizeof(Header)) {
        void* p = mmap(nullptr, sizeof(Header), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
          *err = errno_text("mmap", name);
          close(fd);
          return nullptr;
        }
        h = static_cast<Header*>(p);
      }
      if (h != nullptr && h->magic.load(std::memory_order_acquire) == kSegmentMagic) break;
      if (stopped()) {
        if (h != nullptr) munmap(h, sizeof(Header));
        close(fd);
        return nullptr;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const int seen = h->nranks;
    const size_t seen_slot = h->slot_bytes;
    munmap(h, sizeof(Header));
    *nranks_seen = seen;
    const size_t total = total_bytes(seen, seen_slot);
    void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
      *err = errno_text("mmap", name);
      return nullptr;
    }
    auto* s = new Segment();
    s->name_ = name;
    s->base_ = static_cast<char*>(base);
    s->bytes_ = total;
    s->slot_bytes_ = seen_slot;
    s->nranks_ = seen;
    return s;
  }
}

Segment::~Segment() {
  if (base_ != nullptr) munmap(base_, bytes_);
}

RankCtl* Segment::ctl(int rank) const {
  return reinterpret_cast<RankCtl*>(base_ + ctl_offset()) + rank;
}

char* Segment::slot(int rank, uint64_t parity) const {
  return base_ + data_offset(nranks_) +
         (static_cast<size_t>(rank) * 2 + static_cast<size_t>(parity & 1)) * slot_bytes_;
}

void Segment::poison(const std::string& msg) {
  Header* h = header();
  int32_t expected = 0;
  if (!h->poison.compare_exchange_strong(expected, 1)) return;
  std::snprintf(h->poison_msg, sizeof(h->poison_msg), "%s", msg.c_str());
  h->poison.store(2, std::memory_order_release);
}

void Segment::unlink() {
  if (!unlinked_.exchange(true)) shm_unlink(name_.c_str());
}

}  // namespace ptcsi_nccl
