#include "txl/util/run_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>

#include "txl/util/error.h"
#include "txl/util/fs.h"

namespace txl::fs {

namespace {

// The lock file of `dir`, opened (created when missing) without changing what it holds.
int open_lock_file(const stdfs::path& dir) {
  ensure_dir(dir);
  const stdfs::path path = dir / kLockFile;
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  TXL_CHECK(fd >= 0, "cannot open the lock file ", path.string(), ": ", std::strerror(errno));
  return fd;
}

// Takes the lock on `fd` without waiting: true when taken, false when another open file holds it.
bool lock_now(int fd, const stdfs::path& dir) {
  int rc;
  do {
    rc = ::flock(fd, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc == 0) return true;
  const int err = errno;
  TXL_CHECK(err == EWOULDBLOCK, "cannot lock ", (dir / kLockFile).string(), ": ",
            std::strerror(err));
  return false;
}

// The holder's record, "<pid> <program>\n". A failed write leaves the lock held all the same:
// the record only names the holder in the messages of the processes that find it taken.
void write_holder(int fd) {
  const std::string record =
      std::to_string(::getpid()) + " " + program_invocation_short_name + "\n";
  if (::ftruncate(fd, 0) == 0) {
    [[maybe_unused]] const ssize_t written = ::pwrite(fd, record.data(), record.size(), 0);
  }
}

LockHolder parse_holder(const std::string& text) {
  LockHolder holder;
  std::istringstream in(text);
  long pid = 0;
  if (in >> pid && pid > 0) {
    holder.pid = pid;
    in >> holder.program;
  }
  return holder;
}

// Who holds the lock on the file open as `fd`. Its holder writes the record right after taking
// the lock, so an empty file is read again for a while (1 s).
LockHolder read_holder(int fd) {
  LockHolder holder;
  for (int attempt = 0; attempt < 100; ++attempt) {
    char buffer[256];
    const ssize_t n = ::pread(fd, buffer, sizeof buffer - 1, 0);
    holder = parse_holder(std::string(buffer, n > 0 ? static_cast<size_t>(n) : 0));
    if (holder.pid > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return holder;
}

}  // namespace

std::string LockHolder::describe() const {
  if (pid <= 0) return "another process";
  return "pid " + std::to_string(pid) + (program.empty() ? "" : " (" + program + ")");
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);
}

RunLock::RunLock(RunLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

RunLock& RunLock::operator=(RunLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

RunLock RunLock::try_acquire(const stdfs::path& dir, LockHolder* holder) {
  const int fd = open_lock_file(dir);
  RunLock lock(fd);  // closes the file on every way out but success
  if (!lock_now(fd, dir)) {
    if (holder) *holder = read_holder(fd);
    return RunLock();
  }
  write_holder(fd);
  return lock;
}

RunLock RunLock::acquire_waiting(const stdfs::path& dir,
                                 const std::function<void(const LockHolder&)>& on_wait,
                                 const std::atomic<int>* stop) {
  const int fd = open_lock_file(dir);
  RunLock lock(fd);
  for (bool told = false; !lock_now(fd, dir);) {
    if (!told && on_wait) on_wait(read_holder(fd));
    told = true;
    if (stop && stop->load() != 0) return RunLock();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  write_holder(fd);
  return lock;
}

}  // namespace txl::fs
