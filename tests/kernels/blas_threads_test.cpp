// CoresToBlas: LibTorch on one thread while it lives exactly when OpenBLAS has threads of
// its own, and the count it found afterwards; nested guards unwind in order.
#include "txl/kernels/blas_threads.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include "support/test_support.h"

namespace txl::kernels {
namespace {

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
  test::OpenBlasThreads blas;  // restores OpenBLAS's count
  if (!blas.available()) GTEST_SKIP() << "the BLAS is not OpenBLAS";
  const int before = at::get_num_threads();
  at::set_num_threads(2);
  blas.set(1);
  {
    CoresToBlas guard;
    EXPECT_FALSE(guard.active());
    EXPECT_EQ(at::get_num_threads(), 2);
  }
  blas.set(2);
  {
    CoresToBlas guard;
    EXPECT_TRUE(guard.active());
    EXPECT_EQ(at::get_num_threads(), 1);
  }
  EXPECT_EQ(at::get_num_threads(), 2);
  at::set_num_threads(before);
}

}  // namespace
}  // namespace txl::kernels
