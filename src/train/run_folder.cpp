#include "txl/train/run_folder.h"

#include <signal.h>

#include <cerrno>
#include <sstream>
#include <vector>

#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/json.h"
#include "txl/util/log.h"

namespace txl::train {

namespace stdfs = std::filesystem;

namespace {

const char* const kRunFiles[] = {kLastCheckpoint, kBestCheckpoint, kMetricsFile, kConfigFile};

std::vector<std::string> run_files_in(const stdfs::path& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const char* name : kRunFiles)
    if (stdfs::exists(dir / name, ec)) found.emplace_back(name);
  return found;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// The pid of "<name>.tmp.<pid>", or -1.
long temporary_owner(const std::string& filename) {
  const auto pos = filename.rfind(".tmp.");
  if (pos == std::string::npos || pos == 0) return -1;
  const std::string digits = filename.substr(pos + 5);
  if (digits.empty() || digits.size() > 9 ||
      digits.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  return std::stol(digits);
}

bool process_alive(long pid) { return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM; }

}  // namespace

stdfs::path run_dir(const config::ExperimentConfig& config) {
  return config.run.output_dir.empty() ? stdfs::path("runs") / config.run.name
                                       : stdfs::path(config.run.output_dir);
}

fs::RunLock start_run(const stdfs::path& dir, StartMode mode, bool lock) {
  std::error_code ec;
  const bool existed = stdfs::exists(dir, ec);
  fs::RunLock held;
  if (lock) {
    fs::LockHolder holder;
    held = fs::RunLock::try_acquire(dir, &holder);
    TXL_CHECK(held.held(), dir.string(), " is in use: ", holder.describe(),
              " is writing it; wait for it to end (or stop it), or give this run another "
              "run.name or run.output_dir");
  }
  try {
    check_start(dir, mode);
  } catch (...) {
    if (lock && !existed) {  // the folder the lock made, and its lock file, go again
      held = fs::RunLock();
      stdfs::remove(dir / fs::kLockFile, ec);
      stdfs::remove(dir, ec);
    }
    throw;
  }
  return held;
}

void check_start(const stdfs::path& dir, StartMode mode) {
  const auto found = run_files_in(dir);
  std::error_code ec;
  if (mode == StartMode::kResume) {
    TXL_CHECK(stdfs::exists(dir / kLastCheckpoint, ec), "nothing to resume in ", dir.string(),
              ": it holds no ", kLastCheckpoint,
              found.empty() ? std::string(" (no run yet); start without --resume")
                            : " (only " + joined(found) + "); start again with --overwrite");
    return;
  }
  if (mode == StartMode::kNew) {
    TXL_CHECK(found.empty(), dir.string(), " already holds a run (", joined(found),
              "): continue it with --resume, or delete it and start again with --overwrite");
  }
}

void clear_run(const stdfs::path& dir) {
  for (const char* name : kRunFiles) {
    std::error_code ec;
    stdfs::remove(dir / name, ec);
    TXL_CHECK(!ec, "cannot remove ", (dir / name).string(), ": ", ec.message());
  }
}

int remove_stale_temporaries(const stdfs::path& dir) {
  std::error_code ec;
  if (!stdfs::is_directory(dir, ec)) return 0;
  int removed = 0;
  for (const auto& entry : stdfs::directory_iterator(dir, ec)) {
    const long pid = temporary_owner(entry.path().filename().string());
    if (pid <= 0 || !entry.is_regular_file(ec) || process_alive(pid)) continue;
    if (stdfs::remove(entry.path(), ec)) {
      ++removed;
      log::info("train", "removed {}, left by a killed write", entry.path().string());
    }
  }
  return removed;
}

void truncate_metrics(const stdfs::path& path, std::int64_t step) {
  std::error_code ec;
  if (!stdfs::exists(path, ec)) return;
  const std::string text = fs::read_file(path);
  std::istringstream in(text);
  std::string kept, line;
  std::int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    const json::Json record = json::nested_deeper_than(line)
                                  ? json::Json(json::Json::value_t::discarded)
                                  : json::Json::parse(line, nullptr, /*allow_exceptions=*/false);
    const bool valid =
        record.is_object() && record.contains("step") && record["step"].is_number_integer();
    if (!valid) {
      const bool last = in.peek() == std::char_traits<char>::eof();
      TXL_CHECK(last, path.string(), ":", line_no,
                ": not a metrics record; repair or delete the file");
      log::warn("train", "{}:{}: the last record was cut off (a crash while writing); dropped it",
                path.string(), line_no);
      break;
    }
    if (step < 0 || record["step"].get<std::int64_t>() <= step) kept += line + "\n";
  }
  if (kept != text) fs::write_atomic(path, kept);
}

}  // namespace txl::train
