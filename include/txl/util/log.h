#pragma once
// Tagged log lines ("[data] ...") to stderr, with a process-wide verbosity. fmt formatting.
// A program's main sets the verbosity of the whole run (set_level); anything narrower (a test,
// one quiet call) uses a ScopedLevel, which puts the level back however its scope ends.

#include <fmt/core.h>

#include <string_view>

namespace txl::log {

enum class Level { kQuiet = 0, kInfo = 1, kDebug = 2 };

// The level of the whole process, for a program's main (e.g. quiet on every rank but 0 of a
// data-parallel job, dist::enter_job). Scoped changes use ScopedLevel.
void set_level(Level level);
Level level();

// Sets the level while it lives and restores the level it found when its scope ends, also when
// a test's ASSERT returns early or an exception unwinds:
//   txl::log::ScopedLevel quiet(txl::log::Level::kQuiet);
// Guards nest: each restores what its own construction found, so end them in reverse order (as
// scopes do). Not for levels changed by several threads at once.
class ScopedLevel {
 public:
  explicit ScopedLevel(Level level) : previous_(log::level()) { set_level(level); }
  ~ScopedLevel() { set_level(previous_); }
  ScopedLevel(const ScopedLevel&) = delete;
  ScopedLevel& operator=(const ScopedLevel&) = delete;

 private:
  Level previous_;
};

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
