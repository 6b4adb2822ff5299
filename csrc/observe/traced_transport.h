// The data plane the algorithms see while a timeline records
// (observe/timeline.h): it times every wait and passes everything else
// straight through to the real one. Only the data plane: rounds and
// liveness are the engine's, outside any collective, and stay untraced.
#pragma once

#include <vector>

#include "transport/data_plane.h"

namespace pytfcomm {

class Timeline;

class TracedTransport : public transport::DataPlane {
 public:
  TracedTransport(transport::DataPlane& inner, Timeline& tl) : t_(inner), tl_(tl) {}
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
  const char* take_ahead(int peer, size_t n, const transport::MessageMeta& meta) override {
    return t_.take_ahead(peer, n, meta);
  }
  void wait_all() override;
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
  transport::DataPlane& t_;
  Timeline& tl_;
  std::vector<Post> posts_;
  size_t head_ = 0;
};

}  // namespace pytfcomm
