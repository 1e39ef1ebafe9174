// Incremental decoding on CUDA (label gpu, `ctest -L gpu`, which tools/gpu_check.sh runs; each
// test skips without a CUDA GPU): the decoding steps of every attention type give, at the sizes
// users run and in fp32, the fp64 forward of the same weights on the CPU, and a row of a
// left-padded batch of 16 gives what it gives alone, to the bound the CPU meets
// (models/incremental_test). On the GPU every product goes through LibTorch (ops::Projection),
// and the attention step through the modules' tensor path (a score bias per query).
#include <gtest/gtest.h>

#include "support/reference_decoding.h"

namespace {

TEST(GpuDecoding, Fp32AtUsersSizesEqualsTheFp64Forward) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA GPU";
  txl::test::expect_sized_decoding(torch::Device(torch::kCUDA, 0), "[ cuda fp32] ");
}

}  // namespace
