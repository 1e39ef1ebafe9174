// The one CPU probe and its switch: TXL_CPU_CAPABILITY lowers the kernels' level, never raises
// it above the CPU's, and an unknown value is a clear error naming it.
#include "txl/util/cpu.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "support/test_support.h"

namespace txl::util {
namespace {

TEST(CpuLevel, TheSwitchLowersTheLevelAndNeverRaisesIt) {
  EXPECT_EQ(lowered_level(CpuLevel::kAvx512, nullptr), CpuLevel::kAvx512);
  EXPECT_EQ(lowered_level(CpuLevel::kAvx512, ""), CpuLevel::kAvx512);
  EXPECT_EQ(lowered_level(CpuLevel::kAvx512, "avx2"), CpuLevel::kAvx2);
  EXPECT_EQ(lowered_level(CpuLevel::kAvx512, "default"), CpuLevel::kBaseline);
  EXPECT_EQ(lowered_level(CpuLevel::kAvx2, "avx512"), CpuLevel::kAvx2);
  EXPECT_EQ(lowered_level(CpuLevel::kBaseline, "avx2"), CpuLevel::kBaseline);
  TXL_EXPECT_THROW_WITH(lowered_level(CpuLevel::kAvx2, "avx3"),
                        "TXL_CPU_CAPABILITY = 'avx3': use avx512, avx2 or default");
}

// The level this process runs at: what the CPU has, lowered by the variable the ctest entries
// of each level set (tests/ops/CMakeLists.txt).
TEST(CpuLevel, ThisProcessRunsAtTheCpusLevelOrTheOneAskedFor) {
  const auto& f = cpu_features();
  const CpuLevel best = f.avx512 ? CpuLevel::kAvx512
                        : f.avx2 ? CpuLevel::kAvx2
                                 : CpuLevel::kBaseline;
  EXPECT_EQ(kernel_level(), lowered_level(best, std::getenv("TXL_CPU_CAPABILITY")));
  EXPECT_TRUE(!f.avx512 || f.avx2);  // every AVX-512 CPU has AVX2
  ::testing::Test::RecordProperty("kernel_level", to_string(kernel_level()));
}

// The scope the cross-level tests run each level in: every level the CPU has, lowest first;
// nested scopes restore the level before them; a level above the CPU's best is refused.
TEST(CpuLevel, AScopeRunsTheKernelsAtALevelTheCpuHas) {
  const auto levels = levels_available();
  ASSERT_FALSE(levels.empty());
  EXPECT_EQ(levels.front(), CpuLevel::kBaseline);
  EXPECT_EQ(levels.back(), best_level());
  const CpuLevel before = kernel_level();
  {
    KernelLevelScope outer(CpuLevel::kBaseline);
    EXPECT_EQ(kernel_level(), CpuLevel::kBaseline);
    {
      KernelLevelScope inner(best_level());
      EXPECT_EQ(kernel_level(), best_level());
    }
    EXPECT_EQ(kernel_level(), CpuLevel::kBaseline);
  }
  EXPECT_EQ(kernel_level(), before);
  if (best_level() != CpuLevel::kAvx512) {
    TXL_EXPECT_THROW_WITH(KernelLevelScope(CpuLevel::kAvx512), "cannot run txl's kernels at level");
    EXPECT_EQ(kernel_level(), before);
  }
}

}  // namespace
}  // namespace txl::util
