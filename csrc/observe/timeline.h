// The timeline (PYTFCOMM_TIMELINE, docs/timeline.md): every collective of a
// rank, its phases and its transport waits, as Chrome trace "X" events in
// one JSON file per rank (pid = rank, tid = the calling thread). Events are
// buffered in memory and written every second or 4096 events, at close, on
// error and at exit; after each write the file is complete, valid JSON.
//
// Off by default; then the communicator holds no Timeline and every hook is
// one branch on a null pointer.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "algorithms/collective.h"
#include "common/clock.h"
#include "transport/data_plane.h"

namespace pytfcomm {

class TracedTransport;

struct TraceEvent {
  const char* name;  // a string literal
  const char* cat;   // "collective" | "phase" | "wait"
  int64_t ts_ns;     // steady clock
  int64_t dur_ns;
  uint32_t tid;
  uint32_t seq;
  int32_t peer = -1;
  uint64_t bytes = 0;
  // Collectives only.
  const char* algorithm = nullptr;
  const char* requested = nullptr;  // the algorithm asked for ("auto", ...)
  uint8_t dtype = 0, op = 0;
  int32_t root = -1;
  uint32_t shape_tag = 0;
  uint64_t count = 0;
  int64_t queue_ns = 0;
  bool failed = false;
  std::string label{};  // the caller's name for it (the TF op's node, a NumPy call's thread)
};

class Timeline : public algorithms::Tracer {
 public:
  // The file for `rank`: "%r" in `pattern` becomes the rank, otherwise
  // ".rank<N>" goes before the extension (or at the end).
  static std::string path_for(const std::string& pattern, int rank);
  // Null when `pattern` is empty, or when the file cannot be written (a
  // warning says why, and so does `why` when given; the job goes on without a timeline).
  static std::unique_ptr<Timeline> open(const std::string& pattern, int rank, int size,
                                        const std::string& host, std::string* why = nullptr);
  // `path` opened for writing and emptied, or -1 with `why` set. Never through a
  // symbolic link (O_NOFOLLOW), only a regular file of this process's user with no
  // other hard link; a new file gets mode 0600 (docs/timeline.md, "The file").
  static int open_file(const std::string& path, std::string* why);
  ~Timeline() override;

  static int64_t now_ns();
  // The file being written; "" while stopped.
  std::string path() const;

  // At run time (Horovod's start_timeline/stop_timeline): stop() writes what
  // is buffered, leaves a complete file and drops later events; start()
  // resumes, in the file of `pattern` (path_for) if it names another one
  // (created anew), else in the same file. start() returns false, and warns,
  // when the file cannot be written (the timeline stays stopped; `why` says why).
  void stop() noexcept;
  bool start(const std::string& pattern, std::string* why = nullptr);

  // The transport the algorithms use while tracing (times every wait).
  transport::DataPlane& traced(transport::DataPlane& inner);

  // Around one collective, on the thread that runs it.
  // submit_ns: when the call arrived; locked_ns: when its data began to move
  // (the negotiation in between is its first phase).
  // label: the request's, shown as args.label (which TF op or thread asked).
  void begin_collective(const transport::MessageMeta& meta, const char* name, size_t bytes,
                        int64_t submit_ns, int64_t locked_ns, const std::string& label);
  void note_algorithm(const char* chosen, const char* requested);
  void end_collective(bool failed);

  // A collective that ran outside the engine's turn (the GPU backend with
  // PYTFCOMM_GPU_VERIFY=0 runs NCCL directly): one event, no phases. Any thread.
  void add_collective(const transport::MessageMeta& meta, const char* name, const char* algorithm,
                      const char* requested, size_t bytes, int64_t t0, int64_t t1, bool failed);

  void phase_begin(const char* name, int peer) override;
  void phase_end() override;
  void add_wait(const char* name, int peer, uint64_t bytes, int64_t t0, int64_t t1);
  // Work outside any collective on the calling thread (the TF kernels' fusion
  // and local reduction before their all-reduces); category "local". Any thread.
  void add_span(const char* name, int64_t t0, int64_t t1, uint64_t bytes);

  // Write what is buffered; the file is valid JSON afterwards. Never throws.
  void flush() noexcept;

 private:
  Timeline(int fd, std::string path, int rank, int size, std::string host);
  void write_head();             // with mu_ held
  void flush_locked() noexcept;  // with mu_ held
  void add(const TraceEvent& e);
  void append_json(std::string& out, const TraceEvent& e) const;

  int fd_;
  std::string path_;
  std::atomic<bool> active_{true};
  bool in_collective_ = false;  // begin_collective seen (it may predate a start)
  int rank_, size_;
  std::string host_;
  mutable std::mutex mu_;  // the buffer (flushes may come from the exit handler)
  std::vector<TraceEvent> buf_;
  std::vector<uint32_t> lanes_named_;
  std::string pending_meta_;  // thread-name records not yet written
  int64_t body_end_ = 0;      // file offset where the closing text starts
  int64_t last_flush_ns_ = 0;
  bool write_failed_ = false;

  // The collective in progress and its open phases (one thread at a time).
  TraceEvent cur_{};
  struct Open {
    const char* name;
    int peer;
    int64_t t0;
  };
  Open stack_[8];
  int depth_ = 0;
  std::unique_ptr<TracedTransport> traced_;
};

}  // namespace pytfcomm
