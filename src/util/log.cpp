#include "txl/util/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>

namespace txl::log {

namespace {
std::atomic<int> g_level{static_cast<int>(Level::kInfo)};
std::mutex g_mutex;
}  // namespace

void set_level(Level level) { g_level = static_cast<int>(level); }

Level level() { return static_cast<Level>(g_level.load()); }

void write(std::string_view tag, std::string_view message) {
  std::string line;
  line.reserve(tag.size() + message.size() + 4);
  line += '[';
  line += tag;
  line += "] ";
  line += message;
  line += '\n';
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace txl::log
