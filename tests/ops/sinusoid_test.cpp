#include "txl/ops/sinusoid.h"

#include <gtest/gtest.h>

#include <cmath>

#include "support/test_support.h"

namespace txl::ops {
namespace {

TEST(Sinusoid, MatchesTheFormulaByHand) {
  auto pos = torch::tensor({0.0, 1.0, 7.0}, torch::kDouble);
  auto enc = sinusoid_encoding(pos, 4);  // w = [1, 1/100]
  auto expected = torch::tensor({{0.0, 0.0, 1.0, 1.0},
                                 {std::sin(1.0), std::sin(0.01), std::cos(1.0), std::cos(0.01)},
                                 {std::sin(7.0), std::sin(0.07), std::cos(7.0), std::cos(0.07)}},
                                torch::kDouble);
  EXPECT_TRUE(txl::test::tensor_near(enc, expected, 1e-12, 1e-12));
}

TEST(Sinusoid, InheritsDtypeAndRejectsBadInput) {
  EXPECT_EQ(sinusoid_encoding(torch::arange(3, torch::kFloat), 8).scalar_type(), torch::kFloat);
  EXPECT_EQ(sinusoid_encoding(torch::arange(3, torch::kFloat), 8).sizes(),
            (std::vector<int64_t>{3, 8}));
  TXL_EXPECT_THROW_WITH(sinusoid_encoding(torch::arange(3, torch::kFloat), 5), "even, got 5");
  TXL_EXPECT_THROW_WITH(sinusoid_encoding(torch::arange(3), 4), "float or double");
}

TEST(RelativeDistances, DescendAndClamp) {
  EXPECT_TRUE(txl::test::tensor_equal(relative_distances(5, -1), torch::tensor({4, 3, 2, 1, 0})));
  EXPECT_TRUE(txl::test::tensor_equal(relative_distances(5, 2), torch::tensor({2, 2, 2, 1, 0})));
  EXPECT_TRUE(txl::test::tensor_equal(relative_distances(3, 0), torch::tensor({0, 0, 0})));
  EXPECT_EQ(relative_distances(0, -1).numel(), 0);
  TXL_EXPECT_THROW_WITH(relative_distances(4, -3), "clamp_len must be -1");
}

}  // namespace
}  // namespace txl::ops
