// libFuzzer target for everything pytfcomm parses off the network: the
// acceptor's handshake state machine (the code every listener runs), the
// validators of challenges, confirmations, join replies, address tables and
// frame headers (data, status, beat, round and abort frames), negotiation
// records (engine/round_record.h) and the bundles they travel in between
// hosts (transport/host/bundle.h). Build and run with fuzz/run.sh.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "engine/agreed_cache.h"
#include "engine/round_record.h"
#include "transport/host/bundle.h"
#include "transport/tcp/handshake.h"
#include "transport/wire_check.h"

namespace {

using pytfcomm::tcp::AcceptorSession;
using pytfcomm::tcp::AuthConfig;
namespace wire = pytfcomm::wire;

template <typename T>
T load(const uint8_t* data, size_t size) {
  T out{};
  std::memcpy(&out, data, std::min(size, sizeof(T)));
  return out;
}

// Feed the bytes as a hostile client would, in chunks whose sizes the input
// picks; drain the outbox as the listener does.
void fuzz_session(const AuthConfig& auth, const uint8_t* data, size_t size) {
  AcceptorSession s(auth);
  size_t off = 0;
  while (off < size && s.wanted() > 0) {
    size_t chunk = 1 + data[off] % 64;
    ++off;
    chunk = std::min({chunk, size - off, s.wanted()});
    s.consume(data + off, chunk);
    off += chunk;
    s.outbox().clear();
  }
  if (s.state() == AcceptorSession::State::kDone) {
    // Only a no-secret session can get here without the key; its hello must
    // have passed every check.
    if (!wire::check_hello(s.hello()).empty()) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const AuthConfig with_secret{"fuzzing-secret-0123456789", 0};
  static const AuthConfig without_secret{"", 1};
  uint8_t mode = data[0] % 6;
  data++;
  size--;
  switch (mode) {
    case 0:
      fuzz_session(with_secret, data, size);
      break;
    case 1:
      fuzz_session(without_secret, data, size);
      break;
    case 2: {
      auto c = load<wire::Challenge>(data, size);
      (void)wire::check_challenge(c, 1, size % 2 == 0);
      (void)wire::check_confirm(load<wire::Confirm>(data, size));
      auto r = load<wire::JoinReply>(data, size);
      (void)wire::check_join_reply(r, 4);
      if (size > sizeof(wire::JoinReply)) {
        auto e =
            load<wire::PeerEntry>(data + sizeof(wire::JoinReply), size - sizeof(wire::JoinReply));
        (void)wire::check_peer_entry(e, 2);
      }
      break;
    }
    case 3: {
      // A negotiation record from a hostile peer: accepted records must point
      // only inside themselves and describe only known kinds and types.
      pytfcomm::ParsedRecord rec;
      if (!pytfcomm::parse_record(reinterpret_cast<const char*>(data), size, 7, 4, &rec).empty()) {
        break;
      }
      // Confirmations name slots of the agreed cache: one slot filled here
      // (what the seed's confirmation names), the others empty.
      static const pytfcomm::AgreedCache cache = [] {
        pytfcomm::AgreedCache c;
        pytfcomm::Descriptor d;
        d.count = 4;
        c.learn({11, 3}, d, false, "allreduce #3 of MainThread");
        return c;
      }();
      pytfcomm::Announcement one;
      for (const auto& c : rec.confirms) {
        if (cache.expand(c, &one).empty()) rec.entries.push_back(one);
      }
      for (const auto& a : rec.entries) {
        const char* base = reinterpret_cast<const char*>(data);
        if (a.data && (a.data < base || a.data + a.data_bytes > base + size)) __builtin_trap();
        if (a.data && a.data_bytes != a.desc.count * pytfcomm::dtype_size(a.desc.dtype)) {
          __builtin_trap();
        }
      }
      // The fast path's reading of the same bytes agrees with the full path's.
      if (cache.only_announcement(reinterpret_cast<const char*>(data), size, 7, 4, true, &one) &&
          (rec.entries.size() != 1 || !(one.key == rec.entries[0].key))) {
        __builtin_trap();
      }
      break;
    }
    case 4: {
      // A bundle of negotiation records from a hostile peer: every record
      // accepted (a run's, for each of its ranks) lies inside the bundle,
      // on a cache line, and within the record limit.
      pytfcomm::host::BundleView v;
      const uint32_t count = 1 + (size % 4);
      if (!pytfcomm::host::parse_bundle(reinterpret_cast<const char*>(data), size, 3, count, 512,
                                        &v)
               .empty()) {
        break;
      }
      if (v.offset.size() != count || v.bytes.size() != count) __builtin_trap();
      for (uint32_t i = 0; i < count; ++i) {
        if (v.bytes[i] > 512 || v.offset[i] > size || v.bytes[i] > size - v.offset[i] ||
            v.offset[i] % pytfcomm::host::kBundleAlign != 0) {
          __builtin_trap();
        }
      }
      break;
    }
    default: {
      auto got = load<wire::FrameHeader>(data, size);
      pytfcomm::transport::MessageMeta want;
      want.count = 16;
      auto v = wire::check_frame(got, want, 64, 1 << 20);
      // A frame that passes must match what was posted, length included.
      if (v == wire::FrameVerdict::kOk && (got.nbytes != 64 || !(got.meta == want))) {
        __builtin_trap();
      }
      // A first step sent ahead is read into memory: never over the cap.
      if (v == wire::FrameVerdict::kAhead && got.nbytes > (1 << 20)) __builtin_trap();
      // An abort's reason is read into a buffer of this size: never more.
      if (v == wire::FrameVerdict::kAbort &&
          (got.nbytes > wire::kMaxAbortReason || (got.reserved & ~wire::kAbortAllFlags) != 0)) {
        __builtin_trap();
      }
      break;
    }
  }
  return 0;
}
