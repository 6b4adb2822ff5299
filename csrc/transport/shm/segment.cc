#include "transport/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "common/error.h"

namespace pytfcomm::shm {
namespace {

std::string random_name() {
  unsigned char bytes[12];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t r = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) PTC_THROW(kInternal, "getrandom failed: ", std::strerror(errno));
    got += static_cast<size_t>(r);
  }
  static const char* hex = "0123456789abcdef";
  std::string name = str_cat("/pytfcomm-", ::getpid(), "-");
  for (unsigned char b : bytes) {
    name += hex[b >> 4];
    name += hex[b & 15];
  }
  return name;
}

// MAP_POPULATE: fault every page in now, not one page per message on the
// first pass through each ring (that made the first thousand small messages
// several microseconds slower).
void* map_fd(int fd, size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  return p == MAP_FAILED ? nullptr : p;
}

}  // namespace

Mapping::~Mapping() {
  if (base_ != nullptr) ::munmap(base_, bytes_);
}

OwnedSegment::OwnedSegment(size_t num_rings, size_t ring_bytes, size_t oneshot_bytes) {
  PTC_ENFORCE(oneshot_bytes <= kMaxOneShotBytes, "one-shot buffers too large: ", oneshot_bytes);
  size_t bytes = segment_bytes(num_rings, ring_bytes, oneshot_bytes);
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    name_ = random_name();
    do {
      fd = ::shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0 && (errno != EEXIST || attempt > 8)) {
      PTC_THROW(kConfig, "cannot create the shared-memory segment ", name_, ": ",
                std::strerror(errno),
                " (is /dev/shm mounted and writable?); use PYTFCOMM_TRANSPORT=tcp to avoid "
                "shared memory");
    }
  }
  linked_ = true;
  int rc;
  do {
    rc = ::ftruncate(fd, static_cast<off_t>(bytes));
  } while (rc != 0 && errno == EINTR);
  void* base = rc == 0 ? map_fd(fd, bytes) : nullptr;
  int err = errno;
  ::close(fd);
  if (base == nullptr) {
    unlink();
    PTC_THROW(kConfig, "cannot size or map a ", bytes,
              "-byte shared-memory segment: ", std::strerror(err),
              " (is /dev/shm big enough? lower PYTFCOMM_SHM_RING_BYTES or use "
              "PYTFCOMM_TRANSPORT=tcp)");
  }
  map_ = std::make_shared<Mapping>(base, bytes);
  auto* h = new (base) SegmentHeader{};
  h->magic = kSegmentMagic;
  h->num_rings = static_cast<uint32_t>(num_rings);
  h->ring_bytes = ring_bytes;
  h->oneshot_bytes = static_cast<uint32_t>(oneshot_bytes);
  for (size_t i = 0; i < num_rings; ++i) {
    new (map_->base() + ring_offset(i, ring_bytes)) RingCtl{};
  }
  if (oneshot_bytes > 0) new (map_->base() + oneshot_offset(num_rings, ring_bytes)) OneShotCtl{};
}

void OwnedSegment::unlink() noexcept {
  if (!linked_) return;
  linked_ = false;
  ::shm_unlink(name_.c_str());
}

std::shared_ptr<Mapping> open_segment(const std::string& name, size_t expected_bytes,
                                      std::string* why) {
  int fd;
  do {
    fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    *why = str_cat("cannot open its segment ", name, ": ", std::strerror(errno));
    return nullptr;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != expected_bytes) {
    *why = str_cat("its segment ", name, " has an unexpected size");
    ::close(fd);
    return nullptr;
  }
  void* base = map_fd(fd, expected_bytes);
  int err = errno;
  ::close(fd);
  if (base == nullptr) {
    *why = str_cat("cannot map its segment: ", std::strerror(err));
    return nullptr;
  }
  auto map = std::make_shared<Mapping>(base, expected_bytes);
  if (map->header()->magic != kSegmentMagic) {
    *why = "its segment is not a pytfcomm segment";
    return nullptr;
  }
  return map;
}

}  // namespace pytfcomm::shm
