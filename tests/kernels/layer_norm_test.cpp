// kernels::add_layer_norm equals torch::layer_norm(x + y) against fp64: to 1e-12 in fp64 and 1e-5
// in fp32, with and without the affine weight and bias, for widths that are and are not
// multiples of a vector, leading dimensions kept, rows far from zero mean (the centring is what
// fp32 gets wrong when moments are summed naively), and bad inputs as clear errors.
#include "txl/kernels/layer_norm.h"

#include <gtest/gtest.h>

#include "support/test_support.h"

namespace txl::kernels {
namespace {

using txl::test::tensor_near;

TEST(AddLayerNorm, EqualsLayerNormOfTheSum) {
  for (auto dtype : {torch::kDouble, torch::kFloat}) {
    for (auto [rows, d] :
         std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 7}, {16, 256}, {5, 33}, {64, 1024}}) {
      SCOPED_TRACE(::testing::Message() << rows << " x " << d << " " << dtype);
      torch::manual_seed(rows * 7 + d);
      const auto opts = torch::dtype(dtype);
      auto x = torch::randn({rows, d}, opts) * 3 + 20;  // [N, d]: far from zero mean
      auto y = torch::randn({rows, d}, opts);           // [N, d]
      auto w = torch::randn({d}, opts);                 // [d]
      auto b = torch::randn({d}, opts);                 // [d]
      const double tol = dtype == torch::kDouble ? 1e-12 : 1e-5;
      auto sum = (x.to(torch::kDouble) + y.to(torch::kDouble));  // [N, d]
      for (bool affine : {true, false}) {
        auto weight = affine ? w : torch::Tensor();
        auto bias = affine ? b : torch::Tensor();
        auto want = torch::layer_norm(sum, {d}, affine ? w.to(torch::kDouble) : torch::Tensor(),
                                      affine ? b.to(torch::kDouble) : torch::Tensor(), 1e-5);
        auto got = add_layer_norm(x, y, weight, bias, 1e-5);  // [N, d]
        ASSERT_EQ(got.scalar_type(), dtype);
        EXPECT_TRUE(tensor_near(got.to(torch::kDouble), want, tol, tol)) << "affine " << affine;
      }
      // Only a weight, only a bias.
      auto only_w = torch::layer_norm(sum, {d}, w.to(torch::kDouble), {}, 1e-5);
      EXPECT_TRUE(
          tensor_near(add_layer_norm(x, y, w, {}, 1e-5).to(torch::kDouble), only_w, tol, tol));
      auto only_b = torch::layer_norm(sum, {d}, {}, b.to(torch::kDouble), 1e-5);
      EXPECT_TRUE(
          tensor_near(add_layer_norm(x, y, {}, b, 1e-5).to(torch::kDouble), only_b, tol, tol));
    }
  }
}

TEST(AddLayerNorm, KeepsLeadingDimsAndEps) {
  torch::manual_seed(3);
  auto x = torch::randn({2, 3, 8}, torch::kDouble);  // [2, 3, d]
  auto y = torch::zeros({2, 3, 8}, torch::kDouble);  // [2, 3, d]
  x[1][2].fill_(4.0);                                // a constant row: variance 0
  auto got = add_layer_norm(x, y, {}, {}, 0.5);      // [2, 3, d]
  ASSERT_EQ(got.sizes(), x.sizes());
  EXPECT_TRUE(tensor_near(got, torch::layer_norm(x, {8}, {}, {}, 0.5), 1e-12, 1e-12));
  EXPECT_EQ(got[1][2].abs().max().item<double>(), 0.0);
}

TEST(AddLayerNorm, BadInputsAreClearErrors) {
  auto x = torch::randn({2, 4});
  TXL_EXPECT_THROW_WITH(add_layer_norm(x, torch::randn({2, 3}), {}, {}, 1e-5), "y must be");
  TXL_EXPECT_THROW_WITH(add_layer_norm(x, x.to(torch::kDouble), {}, {}, 1e-5), "y must be");
  TXL_EXPECT_THROW_WITH(add_layer_norm(x.t(), x.t(), {}, {}, 1e-5), "x must be");
  TXL_EXPECT_THROW_WITH(add_layer_norm(x.to(torch::kHalf), x.to(torch::kHalf), {}, {}, 1e-5),
                        "x must be");
  TXL_EXPECT_THROW_WITH(add_layer_norm(x, x, torch::ones({3}), {}, 1e-5), "[d = 4]");
  TXL_EXPECT_THROW_WITH(add_layer_norm(x, x, {}, torch::ones({4}, torch::kDouble), 1e-5),
                        "weight and bias must be");
}

}  // namespace
}  // namespace txl::kernels
