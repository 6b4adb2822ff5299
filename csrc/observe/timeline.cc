#include "observe/timeline.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include "common/collective_kind.h"
#include "common/dtype.h"
#include "common/error.h"
#include "common/logging.h"
#include "observe/traced_transport.h"
#include "pytfcomm_config.h"

namespace pytfcomm {
namespace {

constexpr size_t kFlushEvents = 4096;
constexpr int64_t kFlushEveryNs = 1'000'000'000;

// Timelines still open, flushed by the exit handler (a job that never calls
// close() still leaves a complete file). Leaked on purpose: it must outlive
// every other static.
std::mutex& registry_mu() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::set<Timeline*>& registry() {
  static auto* s = new std::set<Timeline*>;
  return *s;
}
void flush_all_at_exit() {
  std::lock_guard<std::mutex> lock(registry_mu());
  for (Timeline* t : registry()) t->flush();
}

uint32_t this_lane() {
  thread_local uint32_t tid = static_cast<uint32_t>(::syscall(SYS_gettid));
  return tid;
}

void append_escaped(std::string& out, const std::string& s) {
  for (char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      out += '?';
    } else {
      out += ch;
    }
  }
}

bool write_all_at(int fd, const std::string& s, int64_t off) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t w = ::pwrite(fd, s.data() + done, s.size() - done, off + static_cast<int64_t>(done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    done += static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

int Timeline::open_file(const std::string& path, std::string* why) {
  // No O_TRUNC here: whether the file may be emptied is decided on what was opened.
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
  if (fd < 0) {
    int err = errno;
    struct stat link_st;
    if (err == ELOOP && ::lstat(path.c_str(), &link_st) == 0 && S_ISLNK(link_st.st_mode)) {
      *why =
          "it is a symbolic link, and pytfcomm does not follow one there (a link planted in a "
          "shared directory such as /tmp could make it overwrite another file): remove the "
          "link, or write the timeline into a directory of your own";
    } else {
      *why = std::strerror(err);
    }
    return -1;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    *why = std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    *why = "it is not a regular file: name a file path";
  } else if (st.st_uid != ::geteuid()) {
    *why = "it belongs to uid " + std::to_string(st.st_uid) +
           ", not to this process's user, and pytfcomm overwrites only files of your own: "
           "remove it, or write the timeline into a directory of your own";
  } else if (st.st_nlink > 1) {
    *why =
        "it has other hard links, and overwriting it would change their content too: remove "
        "it, or write the timeline into a directory of your own";
  } else if (::ftruncate(fd, 0) != 0) {
    *why = std::strerror(errno);
  } else {
    return fd;
  }
  ::close(fd);
  return -1;
}

std::string Timeline::path_for(const std::string& pattern, int rank) {
  std::string r = std::to_string(rank);
  size_t at = pattern.find("%r");
  if (at != std::string::npos) {
    std::string out = pattern;
    for (; at != std::string::npos; at = out.find("%r", at + r.size())) out.replace(at, 2, r);
    return out;
  }
  size_t slash = pattern.rfind('/');
  size_t dot = pattern.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash) ||
      dot == (slash == std::string::npos ? 0 : slash + 1)) {
    return pattern + ".rank" + r;
  }
  return pattern.substr(0, dot) + ".rank" + r + pattern.substr(dot);
}

std::unique_ptr<Timeline> Timeline::open(const std::string& pattern, int rank, int size,
                                         const std::string& host, std::string* why) {
  if (pattern.empty()) return nullptr;
  std::string path = path_for(pattern, rank);
  std::string reason;
  int fd = open_file(path, &reason);
  if (fd < 0) {
    PTC_LOG(kWarn, "PYTFCOMM_TIMELINE: cannot write ", path, ": ", reason,
            "; running without a timeline");
    if (why) *why = reason;
    return nullptr;
  }
  std::unique_ptr<Timeline> t(new Timeline(fd, path, rank, size, host));
  if (t->write_failed_) {  // the destructor closes it; warned already
    if (why) *why = "writing its first bytes failed";
    return nullptr;
  }
  static std::once_flag once;
  std::call_once(once, [] { std::atexit(flush_all_at_exit); });
  std::lock_guard<std::mutex> lock(registry_mu());
  registry().insert(t.get());
  PTC_LOG(kInfo, "timeline: writing ", path);
  return t;
}

Timeline::Timeline(int fd, std::string path, int rank, int size, std::string host)
    : fd_(fd), path_(std::move(path)), rank_(rank), size_(size), host_(std::move(host)) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    write_head();
  }
  buf_.reserve(256);
  last_flush_ns_ = now_ns();
  flush();
}

void Timeline::write_head() {
  std::string head = "{\"traceEvents\":[\n{\"ph\":\"M\",\"pid\":" + std::to_string(rank_) +
                     ",\"tid\":0,\"name\":\"process_name\",\"args\":{\"name\":\"rank " +
                     std::to_string(rank_) + " (";
  append_escaped(head, host_);
  head += ")\"}},\n{\"ph\":\"M\",\"pid\":" + std::to_string(rank_) +
          ",\"tid\":0,\"name\":\"process_sort_index\",\"args\":{\"sort_index\":" +
          std::to_string(rank_) + "}}";
  lanes_named_.clear();
  write_failed_ = !write_all_at(fd_, head, 0);
  body_end_ = static_cast<int64_t>(head.size());
}

std::string Timeline::path() const {
  std::lock_guard<std::mutex> lock(mu_);
  return active_.load(std::memory_order_relaxed) ? path_ : std::string();
}

void Timeline::stop() noexcept {
  flush();
  active_.store(false, std::memory_order_release);
  std::lock_guard<std::mutex> lock(mu_);
  buf_.clear();  // what raced past the flush
}

bool Timeline::start(const std::string& pattern, std::string* why) {
  const std::string path = path_for(pattern, rank_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (path != path_) {
      std::string reason;
      int fd = open_file(path, &reason);
      if (fd < 0) {
        PTC_LOG(kWarn, "timeline: cannot write ", path, ": ", reason);
        if (why) *why = reason;
        return false;
      }
      if (active_.load(std::memory_order_relaxed)) flush_locked();  // the old file's last events
      ::close(fd_);
      fd_ = fd;
      path_ = path;
      buf_.clear();
      write_head();
      if (write_failed_) {
        if (why) *why = "writing its first bytes failed";
        return false;
      }
    }
  }
  active_.store(true, std::memory_order_release);
  flush();
  PTC_LOG(kInfo, "timeline: writing ", path);
  return true;
}

Timeline::~Timeline() {
  {
    std::lock_guard<std::mutex> lock(registry_mu());
    registry().erase(this);
  }
  flush();
  ::close(fd_);
}

int64_t Timeline::now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

transport::DataPlane& Timeline::traced(transport::DataPlane& inner) {
  if (!traced_) traced_ = std::make_unique<TracedTransport>(inner, *this);
  return *traced_;
}

namespace {
// A collective's event as far as its metadata says (times and lane apart).
TraceEvent collective_event(const transport::MessageMeta& meta, const char* name, size_t bytes) {
  TraceEvent e{};
  e.name = name;
  e.cat = "collective";
  e.seq = meta.seq;
  e.bytes = bytes;
  e.dtype = meta.dtype;
  e.op = meta.op;
  e.root = meta.kind == static_cast<uint8_t>(CollectiveKind::kBroadcast) ? meta.root : -1;
  e.shape_tag = meta.shape_tag;
  e.count = meta.count;
  return e;
}
}  // namespace

void Timeline::begin_collective(const transport::MessageMeta& meta, const char* name, size_t bytes,
                                int64_t submit_ns, int64_t locked_ns, const std::string& label) {
  in_collective_ = true;
  cur_ = collective_event(meta, name, bytes);
  cur_.label = label;
  cur_.queue_ns = locked_ns - submit_ns;
  cur_.ts_ns = submit_ns;  // the span covers the queue too; "queue" is its first phase
  cur_.tid = this_lane();
  depth_ = 0;
  // From the call until every rank had asked for it and the data could move
  // (docs/negotiation.md): waiting for the others, and the rounds.
  add(TraceEvent{"negotiate", "phase", submit_ns, cur_.queue_ns, cur_.tid, meta.seq});
}

void Timeline::add_collective(const transport::MessageMeta& meta, const char* name,
                              const char* algorithm, const char* requested, size_t bytes,
                              int64_t t0, int64_t t1, bool failed) {
  TraceEvent e = collective_event(meta, name, bytes);
  e.ts_ns = t0;
  e.dur_ns = t1 - t0;
  e.tid = this_lane();
  e.algorithm = algorithm;
  e.requested = requested;
  e.failed = failed;
  add(e);
  if (failed) flush();
}

void Timeline::note_algorithm(const char* chosen, const char* requested) {
  cur_.algorithm = chosen;
  cur_.requested = requested;
}

void Timeline::end_collective(bool failed) {
  if (!in_collective_) {  // the timeline started while the collective ran
    depth_ = 0;
    return;
  }
  in_collective_ = false;
  while (depth_ > 0) phase_end();  // an error unwound past open phases
  if (traced_) traced_->forget();
  cur_.dur_ns = now_ns() - cur_.ts_ns;
  cur_.failed = failed;
  add(cur_);
  if (failed || buf_.size() >= kFlushEvents || now_ns() - last_flush_ns_ >= kFlushEveryNs) {
    flush();
  }
}

void Timeline::phase_begin(const char* name, int peer) {
  if (depth_ < 8) stack_[depth_] = {name, peer, now_ns()};
  ++depth_;
  // The first phase of an algorithm names it, unless the engine said more.
  if (cur_.algorithm == nullptr && depth_ == 1) cur_.algorithm = name;
}

void Timeline::phase_end() {
  if (depth_ == 0) return;
  --depth_;
  if (depth_ >= 8) return;
  const Open& o = stack_[depth_];
  TraceEvent e{o.name, "phase", o.t0, now_ns() - o.t0, cur_.tid, cur_.seq, o.peer};
  add(e);
}

void Timeline::add_wait(const char* name, int peer, uint64_t bytes, int64_t t0, int64_t t1) {
  TraceEvent e{name, "wait", t0, t1 - t0, cur_.tid, cur_.seq, peer, bytes};
  add(e);
}

void Timeline::add_span(const char* name, int64_t t0, int64_t t1, uint64_t bytes) {
  TraceEvent e{name, "local", t0, t1 - t0, this_lane(), 0, -1, bytes};
  add(e);
}

void Timeline::add(const TraceEvent& e) {
  if (!active_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(mu_);
  buf_.push_back(e);
}

// Hand-rolled formatting (no printf, no temporaries): flushes run on a
// thread a peer may be waiting for, so an event must cost well under 1 µs.
namespace {
void put(std::string& out, const char* s) { out.append(s); }
void put_u64(std::string& out, uint64_t v) {
  char d[24];
  int n = 0;
  do {
    d[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v);
  while (n) out.push_back(d[--n]);
}
void put_i64(std::string& out, int64_t v) {
  if (v < 0) out.push_back('-');
  put_u64(out, v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v));
}
// Nanoseconds as microseconds with three decimals.
void put_us(std::string& out, int64_t ns) {
  if (ns < 0) {
    out.push_back('-');
    ns = -ns;
  }
  put_u64(out, static_cast<uint64_t>(ns / 1000));
  int frac = static_cast<int>(ns % 1000);
  char f[5] = {'.', static_cast<char>('0' + frac / 100), static_cast<char>('0' + frac / 10 % 10),
               static_cast<char>('0' + frac % 10), 0};
  out.append(f, 4);
}
}  // namespace

void Timeline::append_json(std::string& out, const TraceEvent& e) const {
  put(out, ",\n{\"ph\":\"X\",\"pid\":");
  put_i64(out, rank_);
  put(out, ",\"tid\":");
  put_u64(out, e.tid);
  put(out, ",\"ts\":");
  put_us(out, e.ts_ns);
  put(out, ",\"dur\":");
  put_us(out, e.dur_ns);
  put(out, ",\"cat\":\"");
  put(out, e.cat);
  put(out, "\",\"name\":\"");
  put(out, e.name);
  const bool collective = e.cat[0] == 'c';
  if (e.cat[0] == 'l') {
    put(out, "\",\"args\":{\"seq\":null");  // outside any collective
  } else {
    put(out, "\",\"args\":{\"seq\":");
    put_u64(out, e.seq);
  }
  if (!collective && e.peer >= 0) {
    put(out, ",\"peer\":");
    put_i64(out, e.peer);
  }
  if (e.bytes || collective) {
    put(out, ",\"bytes\":");
    put_u64(out, e.bytes);
  }
  if (collective) {
    put(out, ",\"collective\":\"");
    put(out, e.name);
    put(out, "\",\"count\":");
    put_u64(out, e.count);
    put(out, ",\"dtype\":\"");
    put(out, valid_dtype(e.dtype) ? dtype_name(static_cast<DType>(e.dtype)) : "?");
    put(out, "\",\"op\":\"");
    put(out, valid_op(e.op) ? op_name(static_cast<ReduceOp>(e.op)) : "?");
    put(out, "\",\"algorithm\":\"");
    put(out, e.algorithm ? e.algorithm : "none");
    put(out, "\"");
    if (e.requested) {
      put(out, ",\"requested\":\"");
      put(out, e.requested);
      put(out, "\"");
    }
    if (e.root >= 0) {
      put(out, ",\"root\":");
      put_i64(out, e.root);
    }
    if (e.shape_tag) {
      put(out, ",\"shape_tag\":");
      put_u64(out, e.shape_tag);
    }
    put(out, ",\"queue_us\":");
    put_us(out, e.queue_ns);
    if (!e.label.empty()) {
      put(out, ",\"label\":\"");
      append_escaped(out, e.label);
      put(out, "\"");
    }
    if (e.failed) put(out, ",\"error\":true");
  }
  put(out, "}}");
}

void Timeline::flush() noexcept {
  try {
    std::lock_guard<std::mutex> lock(mu_);
    flush_locked();
  } catch (...) {
    write_failed_ = true;
  }
}

void Timeline::flush_locked() noexcept {
  try {
    last_flush_ns_ = now_ns();
    if (write_failed_) {
      buf_.clear();
      return;
    }
    std::string body;
    body.reserve(buf_.size() * 240);
    for (const TraceEvent& e : buf_) {
      auto seen = std::find(lanes_named_.begin(), lanes_named_.end(), e.tid);
      if (seen == lanes_named_.end()) {
        lanes_named_.push_back(e.tid);
        char name[32] = "thread";
        if (e.tid == this_lane()) pthread_getname_np(pthread_self(), name, sizeof(name));
        body += ",\n{\"ph\":\"M\",\"pid\":" + std::to_string(rank_) +
                ",\"tid\":" + std::to_string(e.tid) +
                ",\"name\":\"thread_name\",\"args\":{\"name\":\"";
        append_escaped(body, name);
        body += " " + std::to_string(e.tid) + "\"}}";
      }
      append_json(body, e);
    }
    buf_.clear();
    std::string tail = "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{\"pytfcomm\":\"" +
                       std::string(PYTFCOMM_VERSION) + "\",\"rank\":" + std::to_string(rank_) +
                       ",\"size\":" + std::to_string(size_) +
                       ",\"clock\":\"CLOCK_MONOTONIC, microseconds\"}}\n";
    // The new events overwrite the old closing text, which is then written
    // again after them: only a crash between these two writes leaves a file
    // without its closing "]}" (python -m pytfcomm timeline merge repairs it).
    if (!write_all_at(fd_, body, body_end_) ||
        !write_all_at(fd_, tail, body_end_ + static_cast<int64_t>(body.size()))) {
      write_failed_ = true;
      PTC_LOG(kWarn, "PYTFCOMM_TIMELINE: writing ", path_, " failed: ", std::strerror(errno),
              "; no more events are recorded");
      return;
    }
    body_end_ += static_cast<int64_t>(body.size());
  } catch (...) {
    write_failed_ = true;  // out of memory: give up on the timeline, not the job
  }
}

}  // namespace pytfcomm
