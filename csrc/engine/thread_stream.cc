#include "engine/thread_stream.h"

#include "common/digest.h"
#include "engine/request.h"

namespace pytfcomm {
namespace {

thread_local ThreadStream t_stream;

}  // namespace

uint64_t stream_id(const std::string& kind, const std::string& text) {
  uint64_t h = fnv1a64(kind);
  h = fnv1a64(":", 1, h);
  h = fnv1a64(text, h);
  return kind == "name" ? h | kNamedStreamBit : h & ~kNamedStreamBit;
}

void set_thread_stream(const std::string& name) {
  t_stream.id = stream_id("thread", name);
  t_stream.name = name;
  t_stream.named = true;
}

const ThreadStream& thread_stream() { return t_stream; }

}  // namespace pytfcomm
