// The transport the algorithms see while a timeline records
// (observe/timeline.h): it times every wait and passes everything else
// straight through to the real transport.
#pragma once

#include <vector>

#include "transport/transport.h"

namespace pytfcomm {

class Timeline;

class TracedTransport : public transport::Transport {
 public:
  TracedTransport(transport::Transport& inner, Timeline& tl) : t_(inner), tl_(tl) {}
  int rank() const override { return t_.rank(); }
  int size() const override { return t_.size(); }
  transport::Handle post_send(int peer, const void* data, size_t n,
                              const transport::MessageMeta& meta) override {
    auto h = t_.post_send(peer, data, n, meta);
    posts_.push_back({h, peer, n, false});
    return h;
  }
  transport::Handle post_recv(int peer, void* data, size_t n,
                              const transport::MessageMeta& meta) override {
    auto h = t_.post_recv(peer, data, n, meta);
    posts_.push_back({h, peer, n, true});
    return h;
  }
  void wait(transport::Handle h) override;
  bool test(transport::Handle h) override { return t_.test(h); }
  void wait_all() override;
  void set_deadline(TimePoint d) override { t_.set_deadline(d); }
  void set_context(const std::string& what) override { t_.set_context(what); }
  void abort(const std::string& reason, ErrorKind why) noexcept override { t_.abort(reason, why); }
  std::string describe_peer(int peer) const override { return t_.describe_peer(peer); }
  void set_status_observer(transport::StatusObserver* o) override { t_.set_status_observer(o); }
  bool send_status(int peer, const transport::MessageMeta& meta, uint32_t flags) noexcept override {
    return t_.send_status(peer, meta, flags);
  }
  std::vector<int> pending_peers() const override { return t_.pending_peers(); }
  // Negotiation rounds are the engine's, outside any collective: untraced.
  size_t round_capacity() const override { return t_.round_capacity(); }
  void round_arm(uint64_t round) override { t_.round_arm(round); }
  char* round_outbox() override { return t_.round_outbox(); }
  void round_publish(size_t bytes) override { t_.round_publish(bytes); }
  bool round_started() override { return t_.round_started(); }
  bool round_complete() override { return t_.round_complete(); }
  const char* round_record(int rank, size_t* bytes) override {
    return t_.round_record(rank, bytes);
  }
  void wait_for(const std::function<bool()>& pred, TimePoint wake_by) override {
    t_.wait_for(pred, wake_by);
  }
  void wake() noexcept override { t_.wake(); }
  void keep_alive() override { t_.keep_alive(); }
  void flush(TimePoint until) noexcept override { t_.flush(until); }
  void set_liveness(double interval_s, double silence_s) override {
    t_.set_liveness(interval_s, silence_s);
  }
  void forget() {
    posts_.clear();  // keeps its capacity: no allocation per collective
    head_ = 0;
  }

 private:
  struct Post {
    transport::Handle handle;
    int peer;
    size_t bytes;
    bool recv;
    bool live = true;
  };
  transport::Transport& t_;
  Timeline& tl_;
  std::vector<Post> posts_;
  size_t head_ = 0;
};

}  // namespace pytfcomm
