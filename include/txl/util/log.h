#pragma once
// Tagged log lines ("[data] ...") to stderr, with a process-wide verbosity. fmt formatting.

#include <fmt/core.h>

#include <string_view>

namespace txl::log {

enum class Level { kQuiet = 0, kInfo = 1, kDebug = 2 };

void set_level(Level level);
Level level();

// Writes "[tag] message\n" to stderr at once (unbuffered), when level() >= kInfo.
void write(std::string_view tag, std::string_view message);

template <typename... Args>
void info(std::string_view tag, fmt::format_string<Args...> format, Args&&... args) {
  if (level() >= Level::kInfo) write(tag, fmt::format(format, std::forward<Args>(args)...));
}

template <typename... Args>
void debug(std::string_view tag, fmt::format_string<Args...> format, Args&&... args) {
  if (level() >= Level::kDebug) write(tag, fmt::format(format, std::forward<Args>(args)...));
}

// Always printed, whatever the level: warnings a researcher must see.
template <typename... Args>
void warn(std::string_view tag, fmt::format_string<Args...> format, Args&&... args) {
  write(tag, "warning: " + fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace txl::log
