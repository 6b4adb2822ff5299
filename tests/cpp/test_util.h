// Helpers shared by the multi-rank C++ tests (ranks run as threads).
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "engine/communicator.h"

namespace pytfcomm::testing_util {

// A port that was free on 127.0.0.1 a moment ago.
inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Options for rank `rank` of a loopback job whose rank 0 listens on `port`.
inline CommOptions loopback_options(int rank, int size, int port) {
  CommOptions o;
  o.rank = rank;
  o.size = size;
  o.root_host = "127.0.0.1";
  o.root_port = port;
  o.bind_host = "127.0.0.1";
  return o;
}

// Runs fn(rank) on n threads and returns what each threw ("" for nothing).
inline std::vector<std::string> on_threads(int n, const std::function<void(int)>& fn) {
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// Runs fn(comm) on n ranks (threads) over loopback TCP; host_of(rank)
// simulates hosts (default: one). Each rank's exception fails the test.
inline void run_ranks(int n, const std::function<void(Communicator&)>& fn,
                      const std::function<std::string(int)>& host_of = nullptr) {
  int port = free_port();
  auto errors = on_threads(n, [&](int r) {
    CommOptions o = loopback_options(r, n, port);
    o.host_id = host_of ? host_of(r) : "host";
    Communicator comm(o);
    fn(comm);
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
}

}  // namespace pytfcomm::testing_util
