#pragma once
// Helpers for data-parallel tests: a free loopback port, and W ranks of one job run as threads
// of this process (each with its own dist::Group over a real TCPStore and Gloo).

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "txl/dist/group.h"

namespace txl::test {

// A TCP port on 127.0.0.1 that was free a moment ago (the kernel's pick for port 0).
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// Runs body(group) on `world` threads, one rank each, and rethrows the first exception.
inline void run_ranks(int world, const std::function<void(dist::Group&)>& body,
                      std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  const int port = free_port();
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        dist::LaunchEnv env;
        env.rank = r;
        env.world_size = world;
        env.master_port = port;
        env.launcher = "test";
        auto group = dist::Group::create(env, timeout);
        body(*group);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace txl::test
