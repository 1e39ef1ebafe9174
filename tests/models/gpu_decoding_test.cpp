// Incremental decoding on CUDA (label gpu, `ctest -L gpu`, which tools/gpu_check.sh runs; each
// test skips without a CUDA GPU): the decoding steps of every attention type give, at the sizes
// users run and in fp32, the fp64 forward of the same weights on the CPU, and a row of a
// left-padded batch of 16 gives what it gives alone, to the bound the CPU meets
// (models/incremental_test). On the GPU every product goes through LibTorch (ops::Projection),
// and the attention step through the modules' tensor path (a score bias per query).
#include <gtest/gtest.h>

#include <iostream>

#include "support/reference_decoding.h"

namespace {

TEST(GpuDecoding, Fp32AtUsersSizesEqualsTheFp64Forward) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA GPU";
  const torch::Device cuda(torch::kCUDA, 0);
  for (const auto& c : txl::test::sized_decoding_cases()) {
    SCOPED_TRACE(c.name);
    const auto e = txl::test::sized_decoding_errors(c, cuda);
    ASSERT_TRUE(e.device.is_cuda()) << e.device;
    ASSERT_GT(e.spread, 0.3);  // not near uniform
    EXPECT_LT(e.alone, txl::test::kSizedDecodingTolerance);
    EXPECT_LT(e.batch, txl::test::kSizedDecodingTolerance);
    EXPECT_GT(e.control, 20 * txl::test::kSizedDecodingTolerance);
    std::cout << "[ cuda fp32] " << c.name << ": decoding against the fp64 forward " << e.alone
              << ", a row in a batch of 16 against alone " << e.batch << ", the control "
              << e.control << "\n";
  }
}

}  // namespace
