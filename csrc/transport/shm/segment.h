// POSIX shared-memory segments: create (receiving rank) or open (sending
// rank) by name, map, and forget the name as soon as possible, so that no
// exit path, SIGKILL included, can leave anything behind in /dev/shm.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "transport/shm/layout.h"

namespace pytfcomm::shm {

class Mapping {
 public:
  Mapping(void* base, size_t bytes) : base_(static_cast<char*>(base)), bytes_(bytes) {}
  ~Mapping();
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  char* base() const { return base_; }
  size_t bytes() const { return bytes_; }
  SegmentHeader* header() const { return reinterpret_cast<SegmentHeader*>(base_); }

 private:
  char* base_;
  size_t bytes_;
};

// A freshly created, zeroed and initialised segment under a random name
// (with a one-shot area of two oneshot_bytes buffers when that is > 0).
// The name stays linked until unlink() (or the destructor): call it once
// every peer has opened the segment.
class OwnedSegment {
 public:
  OwnedSegment(size_t num_rings, size_t ring_bytes, size_t oneshot_bytes = 0);
  ~OwnedSegment() { unlink(); }
  OwnedSegment(const OwnedSegment&) = delete;
  OwnedSegment& operator=(const OwnedSegment&) = delete;

  const std::string& name() const { return name_; }
  std::shared_ptr<Mapping> mapping() const { return map_; }
  void unlink() noexcept;

 private:
  std::string name_;
  bool linked_ = false;
  std::shared_ptr<Mapping> map_;
};

// Map a peer's segment. Returns null (with the reason in *why) when it cannot:
// most likely the peer is not on this host after all.
std::shared_ptr<Mapping> open_segment(const std::string& name, size_t expected_bytes,
                                      std::string* why);

}  // namespace pytfcomm::shm
