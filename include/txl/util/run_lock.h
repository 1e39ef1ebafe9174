#pragma once
// One writer per folder: an advisory lock (flock(2)) on the folder's lock file, held while a
// RunLock lives. The kernel drops it when the process ends, however it ends, so kill -9 leaves no
// stale lock: a lock file left in a folder means nothing by itself and is never removed. The
// holder writes its pid and program name into the file, for the message of the process that
// finds the folder taken.

#include <atomic>
#include <filesystem>
#include <functional>
#include <string>

namespace txl::fs {

inline constexpr const char* kLockFile = ".lock";

// The process that holds a folder's lock, as its lock file says.
struct LockHolder {
  long pid = 0;         // 0 when the file does not say (its holder had not written it yet)
  std::string program;  // e.g. "txl-train"; empty when unknown
  // "pid 4242 (txl-train)", or "another process" when the file does not say.
  std::string describe() const;
};

class RunLock {
 public:
  RunLock() = default;  // holds nothing
  ~RunLock();           // releases the lock (closes the lock file)
  RunLock(RunLock&& other) noexcept;
  RunLock& operator=(RunLock&& other) noexcept;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  // Takes the lock of `dir` (the folder is created with its parents when missing) without
  // waiting. When another process holds it, returns a RunLock that holds nothing and sets
  // *holder. Throws txl::Error naming the lock file when it cannot be opened or locked.
  static RunLock try_acquire(const std::filesystem::path& dir, LockHolder* holder = nullptr);

  // Takes it, waiting while another process holds it (checked every 100 ms): `on_wait` is called
  // once, with the holder, when it must wait. Returns a RunLock that holds nothing when `stop`
  // turns non-zero first (e.g. &util::stop_signal()).
  static RunLock acquire_waiting(const std::filesystem::path& dir,
                                 const std::function<void(const LockHolder&)>& on_wait,
                                 const std::atomic<int>* stop = nullptr);

  bool held() const { return fd_ >= 0; }
  // The open lock file (-1 when not held), for a child process that holds the lock with this
  // one (process::RunOptions::keep_fd): the lock then lasts until both have closed it.
  int fd() const { return fd_; }

 private:
  explicit RunLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace txl::fs
