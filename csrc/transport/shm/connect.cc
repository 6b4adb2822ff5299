#include "transport/shm/connect.h"

#include <sys/random.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "common/error.h"
#include "common/logging.h"

namespace pytfcomm::shm {
namespace {

constexpr uint32_t kOfferMagic = 0x4f4d4853;  // "SHMO"
constexpr uint32_t kAckMagic = 0x414d4853;    // "SHMA"
constexpr uint32_t kVersion = 2;              // 2: abort notes beside the rings (layout.h)
constexpr size_t kMaxName = 64;
constexpr uint64_t kMaxRingBytes = uint64_t{1} << 30;

// Sent once each way on every local pair's TCP connection, before any frame.
struct Offer {
  uint32_t magic;
  uint32_t version;
  uint32_t offering;    // 1: a segment was created for you; 0: use TCP
  uint32_t ring_index;  // your inbound ring in it
  uint64_t segment_bytes;
  uint64_t ring_bytes;
  char name[kMaxName];  // NUL-terminated
  int64_t pid;          // for process_vm_readv of by-reference payloads
  uint64_t probe_addr;  // 8 bytes there hold probe_value: try reading them
  uint64_t probe_value;
};

struct Ack {
  uint32_t magic;
  uint32_t ok;      // 1: mapped your segment
  uint32_t by_ref;  // 1: can read your memory (send large payloads by reference)
  uint32_t reserved;
};

// Whether this process may read the peer's memory (same user and ptrace
// permission, same pid namespace): read the probe the peer offered.
bool can_read_peer(const Offer& o) {
  if (o.pid <= 0 || o.probe_addr == 0) return false;
  uint64_t got = 0;
  iovec local{&got, sizeof(got)};
  iovec remote{reinterpret_cast<void*>(o.probe_addr), sizeof(got)};
  ssize_t r;
  do {
    r = ::process_vm_readv(static_cast<pid_t>(o.pid), &local, 1, &remote, 1, 0);
  } while (r < 0 && errno == EINTR);
  return r == static_cast<ssize_t>(sizeof(got)) && got == o.probe_value;
}

bool power_of_two(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

// Structural checks before the offer's name or sizes are used.
std::string validate(const Offer& o) {
  if (o.magic != kOfferMagic || o.version != kVersion) {
    return "it sent something other than a pytfcomm shared-memory offer (a different "
           "pytfcomm version?)";
  }
  if (!o.offering) return "";
  if (std::memchr(o.name, 0, kMaxName) == nullptr) return "malformed segment name";
  std::string name(o.name);
  if (name.rfind("/pytfcomm-", 0) != 0 || name.find('/', 1) != std::string::npos) {
    return "malformed segment name";
  }
  if (!power_of_two(o.ring_bytes) || o.ring_bytes < 4096 || o.ring_bytes > kMaxRingBytes ||
      o.ring_index >= 4096 || ring_offset(o.ring_index + 1, o.ring_bytes) > o.segment_bytes ||
      o.segment_bytes > segment_bytes(4096, kMaxRingBytes, kMaxOneShotBytes)) {
    return "impossible segment geometry";
  }
  return "";
}

RingView ring_view(const std::shared_ptr<Mapping>& m, size_t index, uint64_t ring_bytes) {
  char* ctl = m->base() + ring_offset(index, ring_bytes);
  return {m, reinterpret_cast<RingCtl*>(ctl), ctl + kRingCtlBytes, ring_bytes};
}

// Maps the peer's segment; null with the reason when that is not possible.
std::shared_ptr<Mapping> open_peer(const Offer& o, std::string* why) {
  auto m = open_segment(o.name, o.segment_bytes, why);
  if (!m) return nullptr;
  const SegmentHeader* h = m->header();
  if (h->ring_bytes != o.ring_bytes || o.ring_index >= h->num_rings ||
      h->oneshot_bytes > kMaxOneShotBytes ||
      segment_bytes(h->num_rings, h->ring_bytes, h->oneshot_bytes) != o.segment_bytes) {
    *why = "its segment does not match its offer";
    return nullptr;
  }
  return m;
}

}  // namespace

Mode parse_mode(const std::string& text) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  if (t.empty() || t == "auto") return Mode::kAuto;
  if (t == "tcp") return Mode::kTcp;
  if (t == "shm") return Mode::kShm;
  PTC_THROW(kConfig, "unknown transport '", text,
            "': expected 'auto' (shared memory between ranks of one host, TCP otherwise), "
            "'tcp' or 'shm' (PYTFCOMM_TRANSPORT / init(transport=...))");
}

const char* mode_name(Mode m) { return m == Mode::kTcp ? "tcp" : m == Mode::kShm ? "shm" : "auto"; }

LocalLinks connect_local_peers(int rank, const std::vector<net::PeerInfo>& peers,
                               std::vector<net::Fd>& fds, Mode mode, size_t ring_bytes,
                               size_t by_ref_bytes, size_t oneshot_bytes, TimePoint deadline) {
  const int n = static_cast<int>(peers.size());
  LocalLinks links;
  links.streams.resize(static_cast<size_t>(n));
  links.segments.resize(static_cast<size_t>(n));
  const std::string& my_host = peers[static_cast<size_t>(rank)].host_id;
  std::vector<int> local;
  for (int r = 0; r < n; ++r) {
    if (r == rank) continue;
    if (peers[static_cast<size_t>(r)].host_id == my_host) {
      local.push_back(r);
    } else if (mode == Mode::kShm) {
      PTC_THROW(kConfig, "PYTFCOMM_TRANSPORT=shm, but rank ", r, " runs on another host (",
                peers[static_cast<size_t>(r)].host,
                "): shared memory only reaches ranks of one host; use 'auto' or 'tcp'");
    }
  }
  if (local.empty()) return links;
  PTC_ENFORCE(power_of_two(ring_bytes) && ring_bytes <= kMaxRingBytes, "bad ring size ",
              ring_bytes);
  std::unique_ptr<OwnedSegment> own;
  if (mode != Mode::kTcp) {
    own = std::make_unique<OwnedSegment>(local.size(), ring_bytes, oneshot_bytes);
  }
  auto what = [&](int r) { return str_cat("rank ", r, " (setting up shared memory)"); };
  auto fd_of = [&](int r) { return fds[static_cast<size_t>(r)].get(); };
  // Lives until every peer has acknowledged (they read it during setup).
  uint64_t probe = 0;
  while (probe == 0) {
    if (::getrandom(&probe, sizeof(probe), 0) != sizeof(probe) && errno != EINTR) probe = 1;
  }

  for (size_t i = 0; i < local.size(); ++i) {
    Offer o{};
    o.magic = kOfferMagic;
    o.version = kVersion;
    if (own) {
      o.offering = 1;
      o.ring_index = static_cast<uint32_t>(i);
      o.segment_bytes = own->mapping()->bytes();
      o.ring_bytes = ring_bytes;
      std::strncpy(o.name, own->name().c_str(), kMaxName - 1);
      o.pid = ::getpid();
      o.probe_addr = reinterpret_cast<uint64_t>(&probe);
      o.probe_value = probe;
    }
    net::write_all(fd_of(local[i]), &o, sizeof(o), deadline, what(local[i]));
  }
  std::vector<Offer> offers(local.size());
  std::vector<std::shared_ptr<Mapping>> theirs(local.size());
  std::vector<std::string> why(local.size());
  for (size_t i = 0; i < local.size(); ++i) {
    net::read_all(fd_of(local[i]), &offers[i], sizeof(Offer), deadline, what(local[i]));
    std::string bad = validate(offers[i]);
    if (!bad.empty()) PTC_THROW(kPeerLost, "rank ", local[i], ": ", bad);
    if (!offers[i].offering) {
      why[i] = "it does not use shared memory (PYTFCOMM_TRANSPORT=tcp there?)";
    } else if (own) {
      theirs[i] = open_peer(offers[i], &why[i]);
    } else {
      why[i] = "this rank does not use shared memory (PYTFCOMM_TRANSPORT=tcp)";
    }
  }
  std::vector<bool> i_read(local.size());
  for (size_t i = 0; i < local.size(); ++i) {
    i_read[i] = theirs[i] && by_ref_bytes > 0 && can_read_peer(offers[i]);
    Ack a{kAckMagic, theirs[i] ? 1u : 0u, i_read[i] ? 1u : 0u, 0};
    net::write_all(fd_of(local[i]), &a, sizeof(a), deadline, what(local[i]));
  }
  std::vector<bool> peer_ok(local.size()), peer_reads(local.size());
  for (size_t i = 0; i < local.size(); ++i) {
    Ack a{};
    net::read_all(fd_of(local[i]), &a, sizeof(a), deadline, what(local[i]));
    if (a.magic != kAckMagic) PTC_THROW(kPeerLost, "rank ", local[i], " broke the shm setup");
    peer_ok[i] = a.ok == 1;
    peer_reads[i] = a.by_ref == 1;
    if (!peer_ok[i] && theirs[i]) why[i] = "it could not map this rank's segment";
  }
  // Everyone who will ever open it has: forget the name now.
  if (own) own->unlink();

  for (size_t i = 0; i < local.size(); ++i) {
    int r = local[i];
    if (!theirs[i] || !peer_ok[i]) {
      if (mode == Mode::kShm) {
        PTC_THROW(kConfig, "PYTFCOMM_TRANSPORT=shm, but rank ", r,
                  " cannot share memory with this rank: ", why[i],
                  ". Are both really on one host, with the same /dev/shm (containers)? Use "
                  "'auto' to fall back to TCP");
      }
      if (mode == Mode::kAuto) {
        PTC_LOG(kInfo, "rank ", r, " stays on TCP: ", why[i]);
      }
      continue;
    }
    RingView in = ring_view(own->mapping(), i, ring_bytes);
    RingView out = ring_view(theirs[i], offers[i].ring_index, offers[i].ring_bytes);
    Doorbell bell(theirs[i]->header());
    ByReference ref;
    ref.peer_pid = i_read[i] ? static_cast<pid_t>(offers[i].pid) : 0;
    // by_ref_bytes counts per rank; the stream sees whole collectives.
    ref.send_from = peer_reads[i] ? by_ref_bytes * static_cast<size_t>(n) : 0;
    if (peer_reads[i]) links.by_ref_bytes = by_ref_bytes;
    links.streams[static_cast<size_t>(r)] = std::make_unique<ShmStream>(
        std::move(in), std::move(out), bell, std::move(fds[static_cast<size_t>(r)]), ref);
    links.segments[static_cast<size_t>(r)] = theirs[i];
  }
  bool any = std::any_of(links.streams.begin(), links.streams.end(),
                         [](const auto& st) { return st != nullptr; });
  if (own && any) {
    links.own = own->mapping();
    links.segments[static_cast<size_t>(rank)] = links.own;
  }
  return links;
}

}  // namespace pytfcomm::shm
