#include "txl/kernels/side_thread.h"

#include <ATen/Parallel.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "txl/kernels/blas_threads.h"

namespace txl::kernels {

namespace {

// Rounds of sched_yield a waiting side thread makes before it sleeps: about a millisecond.
constexpr int kYieldRounds = 2000;

class SideThread {
 public:
  SideThread() {
    std::thread([this] { serve(); }).detach();
  }

  // post hands `there` to the side thread; wait returns once it is done, with its exception.
  void post(const std::function<void()>* there) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      work_ = there;
      error_ = nullptr;
      state_.store(kPosted, std::memory_order_release);
    }
    wake_.notify_one();
  }
  std::exception_ptr wait() {
    while (state_.load(std::memory_order_acquire) != kDone) sched_yield();
    state_.store(kIdle, std::memory_order_relaxed);
    return error_;
  }

 private:
  enum : int { kIdle, kPosted, kDone };

  void serve() {
    for (;;) {
      for (int round = 0; state_.load(std::memory_order_acquire) != kPosted; ++round) {
        if (round < kYieldRounds) {
          sched_yield();
          continue;
        }
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return state_.load(std::memory_order_acquire) == kPosted; });
      }
      try {
        (*work_)();
      } catch (...) {
        error_ = std::current_exception();
      }
      state_.store(kDone, std::memory_order_release);
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<int> state_{kIdle};
  const std::function<void()>* work_ = nullptr;
  std::exception_ptr error_;
};

std::mutex callers;  // one caller at a time uses the side thread

// This process's side thread, started on first use (and again in a forked child, which
// inherits the object but not the thread). Never destroyed: it may still wait at exit.
SideThread* side_thread() {
  static SideThread* side = nullptr;
  static pid_t owner = 0;
  if (side == nullptr || owner != getpid()) {
    side = new SideThread();
    owner = getpid();
  }
  return side;
}

}  // namespace

void run_beside(const std::function<void()>& there, const std::function<void()>& here) {
  std::unique_lock<std::mutex> lock(callers, std::try_to_lock);
  SideThread* side = nullptr;
  if (lock.owns_lock()) {
    try {
      side = side_thread();
    } catch (const std::system_error&) {
      side = nullptr;  // no thread to be had: run both here
    }
  }
  if (side == nullptr) {
    here();
    there();
    return;
  }
  side->post(&there);
  std::exception_ptr mine;
  try {
    here();
  } catch (...) {
    mine = std::current_exception();
  }
  const auto theirs = side->wait();
  if (mine) std::rethrow_exception(mine);
  if (theirs) std::rethrow_exception(theirs);
}

void split_work(int64_t items, int64_t cost, const std::function<void(int64_t, int64_t)>& work) {
  if (items <= 0) return;
  if (blas_has_own_threads()) {
    if (items < 2 || items * cost < 270000) return work(0, items);
    return run_beside([&] { work(items / 2, items); }, [&] { work(0, items / 2); });
  }
  at::parallel_for(0, items, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, cost)), work);
}

}  // namespace txl::kernels
