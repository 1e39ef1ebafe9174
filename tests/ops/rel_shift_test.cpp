#include "txl/ops/rel_shift.h"

#include <gtest/gtest.h>

#include "support/test_support.h"
#include "txl/ops/sinusoid.h"

namespace txl::ops {
namespace {

TEST(RelShift, HandWrittenExample) {
  // Q = 2, K = 3 (M = 1). Row 0 shifts left by Q-1-0 = 1, row 1 by 0.
  auto x = torch::tensor({{10, 11, 12}, {20, 21, 22}}, torch::kFloat);
  auto out = rel_shift(x);
  // Causal entries: row 0 keys 0..1, row 1 keys 0..2.
  EXPECT_EQ(out[0][0].item<float>(), 11);
  EXPECT_EQ(out[0][1].item<float>(), 12);
  EXPECT_TRUE(txl::test::tensor_equal(out[1], torch::tensor({20, 21, 22}, torch::kFloat)));
}

// The position term of appendix B computed with one product + rel_shift must equal the naive
// double loop score(i, j) = q_i . table[min(M + i - j, clamp)] on every causal (i, j).
void check_against_loop(int64_t q_len, int64_t m_len, int64_t clamp_len) {
  torch::manual_seed(q_len * 100 + m_len * 10 + clamp_len);
  const int64_t batch = 2, heads = 3, d_head = 5, k_len = m_len + q_len;
  auto q = torch::randn({batch, heads, q_len, d_head}, torch::kDouble);  // [B, H, Q, D]
  auto table = torch::randn({k_len, heads, d_head}, torch::kDouble);     // [distance, H, D]
  auto r = table.index_select(0, relative_distances(k_len, clamp_len));  // [K, H, D]
  auto by_column = torch::einsum("bhqd,khd->bhqk", {q, r});              // [B, H, Q, K]
  auto shifted = rel_shift(by_column);                                   // [B, H, Q, K]
  ASSERT_EQ(shifted.sizes(), by_column.sizes());
  auto expected = torch::zeros_like(shifted);
  auto got = torch::zeros_like(shifted);
  for (int64_t i = 0; i < q_len; ++i) {
    for (int64_t j = 0; j <= m_len + i; ++j) {
      int64_t dist = m_len + i - j;
      if (clamp_len >= 0) dist = std::min(dist, clamp_len);
      expected.select(2, i).select(2, j).copy_((q.select(2, i) * table[dist]).sum(-1));
      got.select(2, i).select(2, j).copy_(shifted.select(2, i).select(2, j));
    }
  }
  EXPECT_TRUE(txl::test::tensor_near(got, expected, 1e-12, 1e-12))
      << "Q = " << q_len << ", M = " << m_len << ", clamp_len = " << clamp_len;
}

TEST(RelShift, EqualsNaiveLoopWithoutMemory) {
  check_against_loop(5, 0, -1);
  check_against_loop(1, 0, -1);
}
TEST(RelShift, EqualsNaiveLoopMemoryShorterThanSegment) { check_against_loop(6, 2, -1); }
TEST(RelShift, EqualsNaiveLoopMemoryLongerThanSegment) { check_against_loop(3, 7, -1); }
TEST(RelShift, EqualsNaiveLoopWithClamp) {
  check_against_loop(5, 0, 2);
  check_against_loop(6, 2, 3);
  check_against_loop(3, 7, 4);
  check_against_loop(4, 4, 0);
}

TEST(RelShift, GradientFlowsToTheCausalEntriesOnly) {
  auto x = torch::randn({2, 4, 6}, torch::requires_grad());  // Q = 4, K = 6
  auto out = rel_shift(x);
  auto causal = torch::ones({4, 6}, torch::kBool).tril(2);  // j <= i + K - Q
  (out * causal).sum().backward();
  // Each distance column read by a causal entry gets exactly gradient 1: row i reads columns
  // Q-1-i .. K-1.
  auto expected = torch::zeros({4, 6});
  for (int64_t i = 0; i < 4; ++i) expected[i].narrow(0, 3 - i, 3 + i).fill_(1.0);
  EXPECT_TRUE(txl::test::tensor_equal(x.grad(), expected.expand({2, 4, 6})));
}

TEST(RelShift, RejectsMoreQueriesThanKeys) {
  TXL_EXPECT_THROW_WITH(rel_shift(torch::zeros({4, 3})), "K >= Q");
}

}  // namespace
}  // namespace txl::ops

namespace txl::ops {
namespace {

// The custom backward against autograd through the plain view chain, on every entry.
TEST(RelShift, BackwardEqualsAutogradOfTheViewChain) {
  torch::manual_seed(3);
  for (auto [q, k] : std::vector<std::pair<int64_t, int64_t>>{{4, 4}, {3, 7}, {1, 5}}) {
    auto x = torch::randn({2, 3, q, k}, torch::dtype(torch::kDouble).requires_grad(true));
    auto g = torch::randn({2, 3, q, k}, torch::kDouble);
    auto grad = torch::autograd::grad({rel_shift(x)}, {x}, {g})[0];
    auto padded = torch::constant_pad_nd(x, {1, 0});
    auto reference = padded.reshape({2, 3, k + 1, q}).narrow(2, 1, k).reshape({2, 3, q, k});
    auto expected = torch::autograd::grad({reference}, {x}, {g})[0];
    EXPECT_TRUE(txl::test::tensor_equal(grad, expected)) << "Q = " << q << ", K = " << k;
  }
}

}  // namespace
}  // namespace txl::ops
