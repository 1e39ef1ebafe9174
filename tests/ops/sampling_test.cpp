// The filters and the draw of generation on hand-made distributions.
#include "txl/ops/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "support/test_support.h"

namespace txl::ops {
namespace {

const double kInf = std::numeric_limits<double>::infinity();

// Which entries of row `row` survive a filter (finite).
std::vector<int64_t> kept(const torch::Tensor& scores, int64_t row) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < scores.size(1); ++i)
    if (std::isfinite(scores[row][i].item<double>())) out.push_back(i);
  return out;
}

TEST(Sampling, TopPKeepsTheSmallestSetWithMassAtLeastP) {
  // Dyadic probabilities: every partial sum is exact. Row 0: 1/8, 1/2, 1/16, 1/4, 1/16.
  auto probs = torch::tensor({0.125, 0.5, 0.0625, 0.25, 0.0625}, torch::kDouble).view({1, 5});
  // Scores up to a constant per row: the filter reads probabilities from them.
  auto scores = torch::cat({probs.log(), probs.log() + 3.0}, 0);  // [2, 5]
  using V = std::vector<int64_t>;
  for (int64_t row : {0, 1}) {
    EXPECT_EQ(kept(top_p_filter(scores, 0.5), row), (V{1}));  // 1/2 >= 0.5
    EXPECT_EQ(kept(top_p_filter(scores, 0.3), row), (V{1}));
    EXPECT_EQ(kept(top_p_filter(scores, 0.75), row), (V{1, 3}));     // 3/4 exactly
    EXPECT_EQ(kept(top_p_filter(scores, 0.76), row), (V{0, 1, 3}));  // 7/8
    EXPECT_EQ(kept(top_p_filter(scores, 0.875), row), (V{0, 1, 3}));
    EXPECT_EQ(kept(top_p_filter(scores, 0.9), row).size(), 4u);  // one of the two 1/16
    EXPECT_EQ(kept(top_p_filter(scores, 1.0), row).size(), 5u);
  }
  // Kept entries keep their scores.
  auto filtered = top_p_filter(scores, 0.76);
  EXPECT_DOUBLE_EQ(filtered[1][3].item<double>(), scores[1][3].item<double>());
  EXPECT_EQ(filtered[1][2].item<double>(), -kInf);
  TXL_EXPECT_THROW_WITH(top_p_filter(scores, 0.0), "top-p must be in (0, 1]");
}

TEST(Sampling, TopKKeepsTheKLargest) {
  auto scores = torch::tensor({0.1, 3.0, -1.0, 2.0, 2.5}, torch::kDouble).view({1, 5});
  using V = std::vector<int64_t>;
  EXPECT_EQ(kept(top_k_filter(scores, 1), 0), (V{1}));
  EXPECT_EQ(kept(top_k_filter(scores, 3), 0), (V{1, 3, 4}));
  EXPECT_EQ(kept(top_k_filter(scores, 0), 0).size(), 5u);
  EXPECT_EQ(kept(top_k_filter(scores, 9), 0).size(), 5u);
}

TEST(Sampling, DrawIsTheInverseCdf) {
  // Probabilities 0, 1/4, 0, 3/4 (cumulative 0, 1/4, 1/4, 1).
  auto scores = torch::tensor({-kInf, std::log(0.25), -kInf, std::log(0.75)}).view({1, 4});
  auto at = [&](double u) {
    return draw(scores.to(torch::kDouble), torch::tensor({u}, torch::kDouble)).item<int64_t>();
  };
  EXPECT_EQ(at(0.0), 1);  // never an entry of probability 0
  EXPECT_EQ(at(0.2499), 1);
  EXPECT_EQ(at(0.2501), 3);
  EXPECT_EQ(at(0.9999999), 3);
  // An even grid of uniforms gives the probabilities as frequencies, row by row.
  const int n = 1000;
  auto grid = (torch::arange(n, torch::kDouble) + 0.5) / n;  // [n]
  auto probs = torch::tensor({0.1, 0.2, 0.3, 0.4}, torch::kDouble);
  auto drawn = draw(probs.log().expand({n, 4}).contiguous(), grid);  // [n]
  auto counts = torch::bincount(drawn, {}, 4).to(torch::kDouble) / n;
  EXPECT_TRUE(txl::test::tensor_near(counts, probs, 1e-3, 0));
}

}  // namespace
}  // namespace txl::ops
