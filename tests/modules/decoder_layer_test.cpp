#include "txl/modules/decoder_layer.h"

#include <gtest/gtest.h>

#include "support/test_support.h"
#include "txl/modules/positions.h"
#include "txl/ops/masks.h"

namespace txl::modules {
namespace {

// Absolute positions: none the layer adds (vanilla's are the model's), or with abs_positions > 0
// a learned table of that many rows per layer (vanilla_learned).
DecoderLayerOptions options(bool pre_norm, int64_t abs_positions = 0) {
  DecoderLayerOptions o;
  o.attention.d_model = 8;
  o.attention.n_head = 2;
  o.attention.d_head = 4;
  o.attention.positions.scheme = abs_positions > 0 ? "vanilla_learned" : "vanilla";
  o.attention.positions.settings["max_positions"] = abs_positions;
  o.d_inner = 16;
  o.dropout = 0.0;
  o.pre_norm = pre_norm;
  return o;
}

AttentionInputs causal(int64_t q_len, int64_t m_len) {
  AttentionInputs in;
  in.blocked = ops::causal_mask(q_len, m_len).logical_not().view({1, 1, q_len, q_len + m_len});
  return in;
}

TEST(DecoderLayer, PostNormComposition) {
  torch::manual_seed(3);
  DecoderLayer layer(options(false));
  auto x = torch::randn({2, 4, 8});
  auto mem = torch::randn({2, 3, 8});
  auto in = causal(4, 3);
  auto a = layer->attn_norm(x + layer->attn(x, mem, in));
  auto expected = layer->ff_norm(a + layer->ff(a));
  EXPECT_TRUE(txl::test::tensor_near(layer(x, mem, in), expected));
}

TEST(DecoderLayer, PreNormComposition) {
  torch::manual_seed(4);
  DecoderLayer layer(options(true));
  auto x = torch::randn({2, 4, 8});
  auto mem = torch::randn({2, 3, 8});
  auto in = causal(4, 3);
  auto a = x + layer->attn(layer->attn_norm(x), layer->attn_norm(mem), in);
  auto expected = a + layer->ff(layer->ff_norm(a));
  EXPECT_TRUE(txl::test::tensor_near(layer(x, mem, in), expected));
}

TEST(DecoderLayer, LearnedAbsolutePositionsCountWithinTheWindow) {
  torch::manual_seed(5);
  DecoderLayer layer(options(false, 16));
  auto x = torch::randn({1, 4, 8});
  auto mem = torch::randn({1, 3, 8});
  auto table = *layer->named_parameters().find("pos_emb.weight");  // [16, 8]
  auto in = causal(4, 3);
  auto h = x + table.narrow(0, 3, 4);
  auto a = layer->attn_norm(h + layer->attn(h, mem + table.narrow(0, 0, 3), in));
  EXPECT_TRUE(txl::test::tensor_near(layer(x, mem, in), layer->ff_norm(a + layer->ff(a))));
  TXL_EXPECT_THROW_WITH(layer(torch::randn({1, 15, 8}), mem, causal(15, 3)),
                        "18 positions requested but the table has 16");
}

TEST(DecoderLayer, NormInitOptions) {
  auto o = options(false);
  o.init.norm_init = "ones";
  DecoderLayer ones(o);
  EXPECT_TRUE(txl::test::tensor_equal(ones->attn_norm->weight, torch::ones({8})));
  o.init.norm_init = "normal";
  o.init.std = 0.02;
  DecoderLayer normal(o);
  auto w = normal->ff_norm->weight;
  EXPECT_GT((w - 1).abs().max().item<double>(), 0.0);
  EXPECT_LT((w - 1).abs().max().item<double>(), 0.1);
  EXPECT_TRUE(txl::test::tensor_equal(normal->ff->fc1->bias, torch::zeros({16})));
  o.init.init = "gaussian";
  TXL_EXPECT_THROW_WITH(DecoderLayer{o}, "unknown value \"gaussian\" (allowed: normal, uniform)");
}

}  // namespace
}  // namespace txl::modules

namespace txl::modules {
namespace {

TEST(LearnedPositions, LooksUpRowsAndRejectsBadIndices) {
  LearnedPositions table(5, std::vector<int64_t>{2, 3}, InitOptions{});
  auto rows = table(torch::tensor({4, 0, 4}));
  ASSERT_EQ(rows.sizes(), (std::vector<int64_t>{3, 2, 3}));
  EXPECT_TRUE(txl::test::tensor_equal(rows[0], table->weight[4]));
  EXPECT_TRUE(txl::test::tensor_equal(rows[1], table->weight[0]));
  TXL_EXPECT_THROW_WITH(table(torch::tensor({1, 5})), "index 5 outside the table of 5 rows");
}

}  // namespace
}  // namespace txl::modules
