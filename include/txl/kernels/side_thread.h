#pragma once
// A second thread for short loops between OpenBLAS's products. While OpenBLAS holds the cores
// (CoresToBlas: LibTorch on one thread, as in generation on Debian's LibTorch) a loop of
// txl's own would run on the calling thread only; run_beside gives half of it to one persistent
// side thread, which waits for work by yielding the core (sched_yield, as OpenBLAS's idle threads
// do), so that the two take turns without spinning against each other, and sleeps after about
// a millisecond without work. split_work picks it, or LibTorch's threads, for a loop of items:
// attend_cached (attention over cached keys), log_softmax_rows_, linear_packed
// and add_layer_norm in generation.

#include <cstdint>
#include <functional>

namespace txl::kernels {

// Runs `there` on the side thread while the calling thread runs `here`, and returns when both
// have finished; an exception of either is rethrown here (`here`'s first). When the side
// thread is busy (another caller) or cannot start, both run on the calling thread, `here` first.
// After a fork, the child starts a side thread of its own.
void run_beside(const std::function<void()>& there, const std::function<void()>& here);

// Runs work(begin, end) over the items [0, items), each of about `cost` multiply-adds, on the
// threads at hand. Where OpenBLAS has threads of its own (blas_has_own_threads: LibTorch's loops
// run on one thread then, under CoresToBlas, and on 1.13 at::parallel_for is serial in txl's
// code anyway) the items are halved between the caller and run_beside's side thread once they
// hold about 270k multiply-adds, else they run on the caller. Elsewhere (MKL) at::parallel_for
// splits them between LibTorch's threads, about 16k multiply-adds a thread at least.
void split_work(int64_t items, int64_t cost, const std::function<void(int64_t, int64_t)>& work);

}  // namespace txl::kernels
