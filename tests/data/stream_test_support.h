#pragma once
// Helpers shared by the stream tests: arange corpora, the options of each stream with pad id P,
// and the checks every batch must pass.

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "support/test_support.h"
#include "txl/data/stream.h"

namespace txl::data::stream_test {

using txl::test::longs;
using txl::test::tensor_equal;

inline constexpr int P = -1;  // pad id; the corpora below are arange(N), so ids are >= 0

inline torch::Tensor corpus(std::int64_t n) { return torch::arange(n, torch::kInt64); }

inline TrainStreamOptions train_options(std::int64_t b, std::int64_t q, std::int64_t e = 0) {
  TrainStreamOptions o;
  o.batch_size = b;
  o.tgt_len = q;
  o.ext_len = e;
  o.pad_id = P;
  return o;
}

inline EvalStreamOptions eval_options(std::int64_t b, std::int64_t q, std::int64_t e = 0,
                                      std::int64_t w = 0) {
  EvalStreamOptions o;
  o.batch_size = b;
  o.tgt_len = q;
  o.ext_len = e;
  o.warmup = w;
  o.pad_id = P;
  return o;
}

// Invariants every batch must satisfy, whatever the stream: shapes and dtypes, PAD exactly where
// masked, scored targets only on real inputs, n_scored the mask's count, and (arange corpora)
// every scored target is the token after its input.
inline void expect_well_formed(const Batch& batch) {
  const auto b = batch.tokens.size(0), t = batch.tokens.size(1);
  ASSERT_EQ(batch.tokens.scalar_type(), torch::kInt64);
  ASSERT_EQ(batch.targets.scalar_type(), torch::kInt64);
  ASSERT_EQ(batch.input_mask.scalar_type(), torch::kBool);
  ASSERT_EQ(batch.target_mask.scalar_type(), torch::kBool);
  ASSERT_EQ(batch.reset.scalar_type(), torch::kBool);
  ASSERT_EQ(batch.targets.sizes(), batch.tokens.sizes());
  ASSERT_EQ(batch.input_mask.sizes(), batch.tokens.sizes());
  ASSERT_EQ(batch.target_mask.sizes(), batch.tokens.sizes());
  ASSERT_EQ(batch.reset.sizes(), (std::vector<int64_t>{b}));
  EXPECT_GT(t, 0);
  EXPECT_TRUE(tensor_equal(batch.tokens.eq(P), batch.input_mask.logical_not()));
  EXPECT_TRUE(tensor_equal(batch.targets.eq(P), batch.target_mask.logical_not()));
  EXPECT_FALSE(batch.target_mask.logical_and(batch.input_mask.logical_not()).any().item<bool>());
  EXPECT_EQ(batch.n_scored, batch.target_mask.sum().item<int64_t>());
  auto shifted = (batch.tokens + 1).masked_select(batch.target_mask);
  EXPECT_TRUE(tensor_equal(batch.targets.masked_select(batch.target_mask), shifted));
}

inline void expect_same_batch(const Batch& a, const Batch& b) {
  EXPECT_TRUE(tensor_equal(a.tokens, b.tokens));
  EXPECT_TRUE(tensor_equal(a.targets, b.targets));
  EXPECT_TRUE(tensor_equal(a.input_mask, b.input_mask));
  EXPECT_TRUE(tensor_equal(a.target_mask, b.target_mask));
  EXPECT_TRUE(tensor_equal(a.reset, b.reset));
  EXPECT_EQ(a.n_scored, b.n_scored);
  EXPECT_EQ(a.index, b.index);
}

// How many times each token position of an arange corpus of n tokens is a scored target.
inline void count_scored(const Batch& batch, torch::Tensor& counts) {
  auto scored = batch.targets.masked_select(batch.target_mask);
  counts.index_add_(0, scored, torch::ones_like(scored));
}

// Documents of arange(30): [0, 5) [5, 7) [7, 8) [8, 20) [20, 30). The one-token document [7, 8)
// has no target and is skipped.
inline torch::Tensor doc_starts() { return longs({0, 5, 7, 8, 20}); }

}  // namespace txl::data::stream_test
