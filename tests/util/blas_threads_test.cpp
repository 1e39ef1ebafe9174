// util::CoresToBlas: LibTorch on one thread while it lives exactly when OpenBLAS has threads of
// its own, and the count it found afterwards; nested guards unwind in order.
#include "txl/util/blas_threads.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

namespace txl::util {
namespace {

using SetThreads = void (*)(int);

// OpenBLAS's setter, or null when OpenBLAS is not the BLAS (MKL).
SetThreads openblas_set() {
  return reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
}

TEST(CoresToBlas, GivesTheCoresToOpenBlasAndRestoresLibTorchsThreads) {
  const int before = at::get_num_threads();
  at::set_num_threads(2);
  {
    CoresToBlas guard;
    EXPECT_EQ(guard.active(), blas_has_own_threads());
    EXPECT_EQ(at::get_num_threads(), blas_has_own_threads() ? 1 : 2);
    {
      CoresToBlas nested;  // finds one thread (or OpenBLAS without threads): changes nothing
      EXPECT_FALSE(nested.active() && guard.active());
    }
    EXPECT_EQ(at::get_num_threads(), blas_has_own_threads() ? 1 : 2);
  }
  EXPECT_EQ(at::get_num_threads(), 2);
  at::set_num_threads(before);
}

// With OpenBLAS on one thread there is nothing to give: LibTorch keeps its threads.
TEST(CoresToBlas, ChangesNothingWhenOpenBlasRunsOnOneThread) {
  auto set = openblas_set();
  if (set == nullptr) GTEST_SKIP() << "the BLAS is not OpenBLAS";
  using GetThreads = int (*)();
  const auto get = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  const int blas_before = get();
  const int before = at::get_num_threads();
  at::set_num_threads(2);
  set(1);
  {
    CoresToBlas guard;
    EXPECT_FALSE(guard.active());
    EXPECT_EQ(at::get_num_threads(), 2);
  }
  set(2);
  {
    CoresToBlas guard;
    EXPECT_TRUE(guard.active());
    EXPECT_EQ(at::get_num_threads(), 1);
  }
  EXPECT_EQ(at::get_num_threads(), 2);
  set(blas_before);
  at::set_num_threads(before);
}

}  // namespace
}  // namespace txl::util
