// What a transport that sends nothing ahead answers (data_plane.h,
// round_channel.h): the engine asks ahead_room() first, so these are reached
// only by a programming error.
#include "common/error.h"
#include "transport/round_channel.h"

namespace pytfcomm::transport {

const char* DataPlane::take_ahead(int peer, size_t nbytes, const MessageMeta& meta) {
  (void)nbytes;
  (void)meta;
  PTC_THROW(kInternal, "no first step was sent ahead by rank ", peer, " on this transport");
}

void RoundChannel::send_ahead(int peer, const void* data, size_t nbytes, const MessageMeta& meta) {
  (void)data;
  (void)nbytes;
  (void)meta;
  PTC_THROW(kInternal, "this transport cannot send a first step ahead to rank ", peer);
}

}  // namespace pytfcomm::transport
