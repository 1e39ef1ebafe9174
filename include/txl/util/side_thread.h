#pragma once
// A second thread for short loops between OpenBLAS's products. While OpenBLAS holds the cores
// (util::CoresToBlas: LibTorch on one thread, as in generation on Debian's LibTorch) a loop of
// txl's own would run on the calling thread only; run_beside gives half of it to one persistent
// side thread, which waits for work by yielding the core (sched_yield, as OpenBLAS's idle threads
// do), so that the two take turns without spinning against each other, and sleeps after about
// a millisecond without work. Used by ops::attend_cached (attention over cached keys) in
// generation.

#include <functional>

namespace txl::util {

// Runs `there` on the side thread while the calling thread runs `here`, and returns when both
// have finished; an exception of either is rethrown here (`here`'s first). When the side
// thread is busy (another caller) or cannot start, both run on the calling thread, `here` first.
// After a fork, the child starts a side thread of its own.
void run_beside(const std::function<void()>& there, const std::function<void()>& here);

}  // namespace txl::util
