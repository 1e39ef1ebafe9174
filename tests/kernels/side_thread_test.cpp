// run_beside: both halves run, `there` on another thread; exceptions of either half come
// back to the caller after both are done; concurrent callers each get all their work done;
// a forked child gets a side thread of its own; split_work runs every item once.
#include "txl/kernels/side_thread.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "support/test_support.h"

namespace txl::kernels {
namespace {

TEST(RunBeside, RunsBothHalvesAndTheFirstOnAnotherThread) {
  for (int round = 0; round < 100; ++round) {
    std::thread::id there_id, here_id;
    run_beside([&] { there_id = std::this_thread::get_id(); },
               [&] { here_id = std::this_thread::get_id(); });
    EXPECT_EQ(here_id, std::this_thread::get_id());
    EXPECT_NE(there_id, std::thread::id());
    EXPECT_NE(there_id, here_id);
  }
}

TEST(RunBeside, ExceptionsComeBackAfterBothHalvesFinish) {
  std::atomic<bool> there_done{false};
  EXPECT_THROW(run_beside(
                   [&] {
                     std::this_thread::sleep_for(std::chrono::milliseconds(20));
                     there_done = true;
                   },
                   [] { throw std::runtime_error("here"); }),
               std::runtime_error);
  EXPECT_TRUE(there_done);  // not abandoned mid-way
  try {
    run_beside([] { throw std::logic_error("there"); }, [] {});
    ADD_FAILURE() << "no exception from the side thread";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "there");
  }
  int after = 0;  // the side thread still serves
  run_beside([&] { after += 1; }, [&] { after += 2; });
  EXPECT_EQ(after, 3);
}

TEST(RunBeside, ConcurrentCallersEachGetAllTheirWork) {
  constexpr int kCallers = 4, kRounds = 500;
  std::vector<std::atomic<int>> done(kCallers);
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int r = 0; r < kRounds; ++r) run_beside([&] { done[c] += 1; }, [&] { done[c] += 1000; });
    });
  }
  for (auto& t : callers) t.join();
  for (int c = 0; c < kCallers; ++c) EXPECT_EQ(done[c].load(), kRounds * 1001) << "caller " << c;
}

TEST(RunBeside, AForkedChildGetsASideThreadOfItsOwn) {
  int warm = 0;
  run_beside([&] { warm += 1; }, [] {});  // the parent's side thread exists
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(20);  // a hang ends the child with SIGALRM
    std::thread::id there_id;
    run_beside([&] { there_id = std::this_thread::get_id(); }, [] {});
    _exit(there_id != std::thread::id() && there_id != std::this_thread::get_id() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  EXPECT_EQ(warm, 1);
}

// Every item runs exactly once, on either path: OpenBLAS on two threads (the side thread, for
// enough work) and on one or absent (LibTorch's parallel_for).
TEST(SplitWork, RunsEveryItemOnce) {
  test::OpenBlasThreads blas;  // restores OpenBLAS's count
  for (int threads : {1, 2}) {
    blas.set(threads);
    for (int64_t items : {0, 1, 3, 1000}) {
      for (int64_t cost : {1, 1000000}) {
        SCOPED_TRACE(::testing::Message()
                     << threads << " threads, " << items << " items of " << cost);
        std::vector<std::atomic<int>> runs(static_cast<size_t>(items));
        split_work(items, cost, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) runs[static_cast<size_t>(i)] += 1;
        });
        for (int64_t i = 0; i < items; ++i) EXPECT_EQ(runs[static_cast<size_t>(i)].load(), 1) << i;
      }
    }
  }
}

}  // namespace
}  // namespace txl::kernels
