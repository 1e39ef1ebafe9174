// ops::batched_matmul, the attention's q k^T and weights v: the kernel's values and gradients
// against torch::matmul's, in fp64 to 1e-10 and in fp32 to its rounding, on the layouts the
// attention gives it; elsewhere (other dtypes) it is torch::matmul itself.
#include "txl/ops/matmul.h"

#include <gtest/gtest.h>

#include "support/test_support.h"
#include "txl/util/error.h"

namespace txl::ops {
namespace {

// Values and both gradients of a b against torch::matmul's, for a [H, B, Q, D] and b the keys
// [H, B, K, D] transposed (the content scores), then weights [H, B, Q, K] times values.
void expect_matmul(torch::ScalarType dtype, double tolerance) {
  torch::manual_seed(7);
  const int64_t heads = 3, batch = 2, q_len = 5, k_len = 13, d_head = 41;
  const auto opts = torch::dtype(dtype);
  for (bool scores : {true, false}) {
    SCOPED_TRACE(scores ? "q k^T" : "weights v");
    auto a = (scores ? torch::randn({heads, batch, q_len, d_head}, opts) * 3
                     : torch::rand({heads, batch, q_len, k_len}, opts))
                 .requires_grad_(true);
    auto keys = torch::randn({heads, batch, k_len, d_head}, opts).requires_grad_(true);
    const auto b = scores ? keys.transpose(-1, -2) : keys;
    const auto grad = torch::randn({heads, batch, q_len, scores ? k_len : d_head}, opts);
    const auto got = batched_matmul(a, b);
    const auto [ga, gk] = [&] {
      const auto g = torch::autograd::grad({got}, {a, keys}, {grad});
      return std::pair{g[0], g[1]};
    }();
    const auto want = torch::matmul(a, b);
    const auto g = torch::autograd::grad({want}, {a, keys}, {grad});
    ASSERT_EQ(got.sizes(), want.sizes());
    EXPECT_TRUE(txl::test::tensor_near(got, want, tolerance, tolerance));
    EXPECT_TRUE(txl::test::tensor_near(ga, g[0], tolerance, tolerance));
    EXPECT_TRUE(txl::test::tensor_near(gk, g[1], tolerance, tolerance));
    // A control: one key's gradient missing is seen.
    auto broken = gk.clone();
    broken.select(2, k_len - 1).zero_();
    EXPECT_FALSE(txl::test::tensor_near(broken, g[1], tolerance, tolerance));
  }
}

TEST(BatchedMatmul, EqualsMatmulInValuesAndGradients) {
  expect_matmul(torch::kDouble, 1e-10);
  expect_matmul(torch::kFloat, 1e-4);
}

// The second derivative (a backward with a graph) equals torch::matmul's.
TEST(BatchedMatmul, DifferentiatesTwice) {
  torch::manual_seed(5);
  const auto opts = torch::dtype(torch::kDouble).requires_grad(true);
  auto a = torch::randn({2, 3, 4, 5}, opts), b = torch::randn({2, 3, 5, 6}, opts);
  const auto second = [&](bool ours) {
    const auto c = ours ? batched_matmul(a, b) : torch::matmul(a, b);
    const auto ga = torch::autograd::grad({c.pow(2).sum()}, {a}, {}, true, true)[0];
    return torch::autograd::grad({ga.pow(2).sum()}, {b})[0];
  };
  EXPECT_TRUE(txl::test::tensor_near(second(true), second(false), 1e-10, 1e-10));
}

TEST(BatchedMatmul, OtherDtypesAreMatmulAndBadShapesAreRefused) {
  const auto a = torch::randn({2, 3, 4}).to(torch::kBFloat16);
  const auto b = torch::randn({2, 4, 5}).to(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(batched_matmul(a, b), torch::matmul(a, b)));
  TXL_EXPECT_THROW_WITH(batched_matmul(torch::randn({2, 3, 4}), torch::randn({2, 5, 4})),
                        "batched_matmul: a [..., M, K] and b [..., K, N]");
  TXL_EXPECT_THROW_WITH(batched_matmul(torch::randn({2, 3, 4}), torch::randn({3, 4, 4})),
                        "the same leading dimensions");
}

}  // namespace
}  // namespace txl::ops
