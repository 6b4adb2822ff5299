// The stream of the calling thread (docs/negotiation.md): collectives a
// thread calls without a name are matched across ranks as "the n-th
// collective of the thread named X" on this communicator. The Python
// bindings name each thread after its Python name (threading.Thread.name:
// "MainThread", "Thread-1", ... alike on every rank of an SPMD program);
// the engine's own threads name themselves; any other thread is "unnamed".
#pragma once

#include <cstdint>
#include <string>

namespace pytfcomm {

struct ThreadStream {
  uint64_t id = 0;
  std::string name = "an unnamed thread";
  bool named = false;
};

// The stream id of collectives named `text` (a thread, a TF op, a name=);
// kind "name" gives a named stream (kNamedStreamBit), any other kind not.
uint64_t stream_id(const std::string& kind, const std::string& text);

// Names the calling thread's stream (once per thread is enough).
void set_thread_stream(const std::string& name);
const ThreadStream& thread_stream();

}  // namespace pytfcomm
