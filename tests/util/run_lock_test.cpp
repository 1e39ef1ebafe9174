// fs::RunLock: one holder of a folder's lock at a time, across processes and within one; the
// refused one learns the holder's pid; a holder killed with SIGKILL leaves no stale lock.
#include "txl/util/run_lock.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "support/test_support.h"
#include "txl/util/fs.h"

namespace {

using txl::fs::LockHolder;
using txl::fs::RunLock;
using txl::test::TempDir;

// A process that takes the lock of `dir`, says whether it got it through a pipe, and then
// waits to be killed.
pid_t start_holder(const std::filesystem::path& dir, bool* held) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    const RunLock lock = RunLock::try_acquire(dir);
    const char answer = lock.held() ? 'y' : 'n';
    if (::write(fds[1], &answer, 1) != 1) ::_exit(1);
    for (;;) ::pause();
  }
  ::close(fds[1]);
  char answer = 0;
  EXPECT_EQ(::read(fds[0], &answer, 1), 1);
  ::close(fds[0]);
  *held = answer == 'y';
  return pid;
}

TEST(RunLock, AnotherProcessIsRefusedNamingTheHolderUntilTheHolderIsKilled) {
  TempDir dir;
  const auto run = dir / "runs" / "a";  // created by the lock
  bool held = false;
  const pid_t holder_pid = start_holder(run, &held);
  ASSERT_GT(holder_pid, 0);
  ASSERT_TRUE(held);
  LockHolder holder;
  const RunLock refused = RunLock::try_acquire(run, &holder);
  EXPECT_FALSE(refused.held());
  EXPECT_EQ(refused.fd(), -1);
  EXPECT_EQ(holder.pid, holder_pid);
  EXPECT_EQ(holder.describe(), "pid " + std::to_string(holder_pid) + " (" + holder.program + ")");
  EXPECT_FALSE(holder.program.empty());
  // A waiting acquire says once whom it waits for, and gives up when asked to stop.
  std::atomic<int> stop{1};
  int told = 0;
  const RunLock stopped = RunLock::acquire_waiting(
      run,
      [&](const LockHolder& h) {
        ++told;
        EXPECT_EQ(h.pid, holder_pid);
      },
      &stop);
  EXPECT_FALSE(stopped.held());
  EXPECT_EQ(told, 1);
  ::kill(holder_pid, SIGKILL);
  ::waitpid(holder_pid, nullptr, 0);
  const RunLock mine = RunLock::try_acquire(run, &holder);
  EXPECT_TRUE(mine.held());
  EXPECT_EQ(txl::fs::read_file(run / txl::fs::kLockFile).rfind(std::to_string(::getpid()) + " ", 0),
            0u);
}

TEST(RunLock, OneHolderWithinAProcessTooAndAWaiterGetsItWhenItIsReleased) {
  TempDir dir;
  RunLock first = RunLock::try_acquire(dir.path());
  ASSERT_TRUE(first.held());
  LockHolder holder;
  EXPECT_FALSE(RunLock::try_acquire(dir.path(), &holder).held());
  EXPECT_EQ(holder.pid, ::getpid());
  std::atomic<bool> waiting{false};
  RunLock second;
  std::thread waiter([&] {
    second = RunLock::acquire_waiting(dir.path(), [&](const LockHolder&) { waiting = true; });
  });
  while (!waiting) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  first = RunLock();  // released
  waiter.join();
  EXPECT_TRUE(second.held());
  EXPECT_FALSE(first.held());
}

}  // namespace
