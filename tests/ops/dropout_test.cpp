#include "txl/ops/dropout.h"

#include <gtest/gtest.h>

#include "support/test_support.h"

namespace txl::ops {
namespace {

// Kept elements are x / (1 - p), dropped ones 0, the kept fraction is 1 - p within a few
// standard deviations, and the gradient is the same mask: grad x = noise.
TEST(Dropout, KeepsAFractionOneMinusPScaledUp) {
  torch::manual_seed(1);
  for (auto type : {torch::kFloat, torch::kDouble, torch::kBFloat16}) {
    SCOPED_TRACE(c10::toString(type));
    for (double p : {0.1, 0.5, 0.9}) {
      const std::int64_t n = 200001;  // odd: the last element is the low half of a pair
      const torch::Tensor x =
          (torch::rand({n}, torch::kDouble) + 1).to(type).requires_grad_();  // [n]
      const torch::Tensor y = ops::dropout(x, p, true);                      // [n]
      ASSERT_EQ(y.scalar_type(), type);
      const torch::Tensor kept = y.ne(0);
      const double fraction = kept.to(torch::kDouble).mean().item<double>();
      EXPECT_NEAR(fraction, 1 - p, 5 * std::sqrt(p * (1 - p) / n)) << "p " << p;
      const torch::Tensor scale = torch::full({}, 1.0 / (1 - p), torch::dtype(type));
      EXPECT_TRUE(
          txl::test::tensor_equal(y.masked_select(kept), x.detach().masked_select(kept) * scale));
      const torch::Tensor grad = torch::autograd::grad({y.sum()}, {x})[0];
      EXPECT_TRUE(txl::test::tensor_equal(grad, kept.to(type) * scale));
    }
  }
}

// Neighbouring elements (the two halves of one hash) and far-apart ones are independent: the
// pair counts of (kept, kept) match (1 - p)^2.
TEST(Dropout, NeighboursAreIndependent) {
  torch::manual_seed(2);
  const double p = 0.3;
  const std::int64_t n = 400000;
  const torch::Tensor kept =
      ops::dropout(torch::ones({n}), p, true).ne(0).to(torch::kDouble);  // [n]
  for (std::int64_t lag : {1, 2, 3, 64, 32768}) {
    const double both =
        (kept.narrow(0, 0, n - lag) * kept.narrow(0, lag, n - lag)).mean().item<double>();
    EXPECT_NEAR(both, (1 - p) * (1 - p), 5 * std::sqrt(0.49 * 0.51 / (n - lag))) << "lag " << lag;
  }
}

// The mask follows the default generator: the same seed gives the same mask, the next call
// another one, and the number of intra-op threads does not matter.
TEST(Dropout, ReproducibleFromTheSeedWhateverTheThreads) {
  const torch::Tensor x = torch::ones({3, 70000});  // more than one parallel grain
  const int threads = torch::get_num_threads();
  torch::manual_seed(5);
  torch::set_num_threads(1);
  const torch::Tensor a = ops::dropout(x, 0.2, true);
  const torch::Tensor b = ops::dropout(x, 0.2, true);
  torch::manual_seed(5);
  torch::set_num_threads(2);
  const torch::Tensor c = ops::dropout(x, 0.2, true);
  torch::set_num_threads(threads);
  EXPECT_TRUE(txl::test::tensor_equal(a, c));
  EXPECT_FALSE(a.equal(b));
}

TEST(Dropout, IdentityWhenNotTrainingOrPZero) {
  const torch::Tensor x = torch::randn({5, 7});
  EXPECT_TRUE(ops::dropout(x, 0.5, false).is_same(x));
  EXPECT_TRUE(ops::dropout(x, 0.0, true).is_same(x));
  EXPECT_TRUE(txl::test::tensor_equal(ops::dropout(x, 1.0, true), torch::zeros({5, 7})));
  TXL_EXPECT_THROW_WITH(ops::dropout(x, 1.5, true), "p must be in [0, 1]");
}

}  // namespace
}  // namespace txl::ops
