#include "txl/ops/masks.h"

#include <gtest/gtest.h>

#include "support/test_support.h"

namespace txl::ops {
namespace {

torch::Tensor bools(std::vector<std::vector<int>> rows) {
  std::vector<torch::Tensor> out;
  for (auto& row : rows) out.push_back(torch::tensor(std::vector<int64_t>(row.begin(), row.end())));
  return torch::stack(out).to(torch::kBool);
}

TEST(CausalMask, NoMemory) {
  EXPECT_TRUE(txl::test::tensor_equal(causal_mask(3, 0), bools({{1, 0, 0}, {1, 1, 0}, {1, 1, 1}})));
}

TEST(CausalMask, WithMemorySeesAllMemory) {
  EXPECT_TRUE(
      txl::test::tensor_equal(causal_mask(2, 3), bools({{1, 1, 1, 1, 0}, {1, 1, 1, 1, 1}})));
}

TEST(CausalMask, WindowKeepsTheMostRecentKeys) {
  // same_length with mem_len 2: every query sees exactly 2 keys (itself and one before).
  EXPECT_TRUE(txl::test::tensor_equal(causal_mask(3, 2, 2),
                                      bools({{0, 1, 1, 0, 0}, {0, 0, 1, 1, 0}, {0, 0, 0, 1, 1}})));
  // First segment (no memory yet): early queries see fewer keys, never more than the window.
  EXPECT_TRUE(
      txl::test::tensor_equal(causal_mask(3, 0, 2), bools({{1, 0, 0}, {1, 1, 0}, {0, 1, 1}})));
  // A window at least K wide changes nothing.
  EXPECT_TRUE(txl::test::tensor_equal(causal_mask(2, 3, 5), causal_mask(2, 3)));
}

TEST(AttentionMask, CombinesPaddingAndExtra) {
  auto key_mask = bools({{1, 1, 1}, {0, 1, 1}});  // row 1: first key is padding
  auto visible = attention_mask(3, 0, 0, key_mask, {});
  ASSERT_EQ(visible.sizes(), (std::vector<int64_t>{2, 3, 3}));
  EXPECT_TRUE(txl::test::tensor_equal(visible[0], causal_mask(3, 0)));
  EXPECT_TRUE(txl::test::tensor_equal(visible[1], bools({{0, 0, 0}, {0, 1, 0}, {0, 1, 1}})));
  auto extra = bools({{1, 1, 1}, {1, 1, 1}, {0, 1, 1}});
  auto both = attention_mask(3, 0, 0, key_mask, extra);
  EXPECT_TRUE(txl::test::tensor_equal(both[0], bools({{1, 0, 0}, {1, 1, 0}, {0, 1, 1}})));
  EXPECT_EQ(attention_mask(3, 0, 0, {}, {}).sizes(), (std::vector<int64_t>{1, 3, 3}));
}

TEST(AttentionMask, RejectsWrongShapes) {
  TXL_EXPECT_THROW_WITH(attention_mask(3, 1, 0, torch::ones({2, 3}, torch::kBool), {}),
                        "key_mask must be bool [B, K = 4]");
  TXL_EXPECT_THROW_WITH(attention_mask(3, 0, 0, {}, torch::ones({3, 4}, torch::kBool)),
                        "extra mask must be bool [Q, K]");
  TXL_EXPECT_THROW_WITH(causal_mask(3, -1), "lengths must be >= 0");
}

TEST(BlockedScore, FiniteForEveryFloatType) {
  for (auto t : {torch::kFloat, torch::kDouble, torch::kBFloat16, torch::kHalf}) {
    auto v = torch::full({1}, blocked_score(t), torch::dtype(t));
    EXPECT_TRUE(torch::isfinite(v).all().item<bool>()) << t;
    EXPECT_LT(v.item<double>(), -1e4) << t;
  }
}

}  // namespace
}  // namespace txl::ops

namespace txl::ops {
namespace {

TEST(ScoreBias, ZeroWhereVisibleBlockedScoreWhereHidden) {
  auto blocked = causal_mask(2, 1).logical_not();  // [[0 0 1] [0 0 0]]
  auto bias = score_bias(blocked, torch::kFloat);
  EXPECT_EQ(bias.scalar_type(), torch::kFloat);
  auto expected = torch::zeros({2, 3});
  expected[0][2] = blocked_score(torch::kFloat);
  EXPECT_TRUE(txl::test::tensor_equal(bias, expected));
  // Added to scores it zeroes the hidden weights exactly.
  auto weights = torch::softmax(torch::randn({2, 3}) + bias, -1);
  EXPECT_EQ(weights[0][2].item<float>(), 0.0f);
}

}  // namespace
}  // namespace txl::ops
