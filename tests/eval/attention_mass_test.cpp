// Attention by distance (attention_mass.h): the grouped shares equal the weights counted one by
// one, in the evaluation's own segments and memory; causality (nothing ahead of the query), rows
// that sum to one, no memory share without memory; and the refusals.
#include "txl/eval/attention_mass.h"

#include "support/test_support.h"
#include "support/tiny_experiment.h"
#include "txl/data/stream.h"
#include "txl/eval/evaluator.h"

namespace {

using namespace txl::eval;  // NOLINT: the module under test

Settings memory_settings(int mem_len) {
  Settings s;
  s.tgt_len = 4;
  s.mem_len = mem_len;
  s.batch_size = 2;
  s.cache_kv = false;
  return s;
}

// The same evaluation, each scored query's weights counted into its group by a loop.
AttentionMass counted(txl::models::TransformerLM& model, const torch::Tensor& ids,
                      const Settings& s, const std::vector<std::int64_t>& edges) {
  txl::data::EvalStream stream(ids, eval_stream_options(s));
  const auto layers = static_cast<std::int64_t>(model->config().n_layer);
  AttentionMass out;
  out.mass = torch::zeros({layers, static_cast<std::int64_t>(edges.size())}, torch::kDouble);
  out.memory = torch::zeros({layers}, torch::kDouble);
  out.future = torch::zeros({layers}, torch::kDouble);
  torch::NoGradGuard no_grad;
  txl::models::Memory memory;
  while (auto batch = stream.next()) {
    const std::int64_t m = memory.length();
    std::vector<torch::Tensor> weights;
    memory = model
                 ->forward(txl::models::Inputs::of(*batch), memory, segment_lookback(s, model),
                           false, &weights)
                 .memory;
    for (std::int64_t l = 0; l < layers; ++l) {
      const auto w = weights[static_cast<size_t>(l)].to(torch::kDouble);  // [B, H, T, K]
      const auto a = w.accessor<double, 4>();
      const auto mask = batch->target_mask.accessor<bool, 2>();
      for (std::int64_t b = 0; b < w.size(0); ++b)
        for (std::int64_t t = 0; t < w.size(2); ++t) {
          if (!mask[b][t]) continue;
          for (std::int64_t h = 0; h < w.size(1); ++h)
            for (std::int64_t k = 0; k < w.size(3); ++k) {
              const double share = a[b][h][t][k] / static_cast<double>(w.size(1));
              const std::int64_t d = m + t - k;
              if (d < 0) {
                out.future[l] += share;
                continue;
              }
              size_t g = 0;
              while (g + 1 < edges.size() && edges[g + 1] <= d) ++g;
              out.mass[l][static_cast<std::int64_t>(g)] += share;
              if (k < m) out.memory[l] += share;
            }
        }
    }
    out.queries += batch->n_scored;
  }
  out.mass /= static_cast<double>(out.queries);
  out.memory /= static_cast<double>(out.queries);
  out.future /= static_cast<double>(out.queries);
  return out;
}

TEST(AttentionByDistance, EqualsTheWeightsCountedOneByOne) {
  torch::manual_seed(3);
  txl::test::TempDir dir;
  auto config = txl::test::tiny_experiment(dir.path());
  txl::models::TransformerLM model(config.model, 30);
  model->eval();
  const auto ids = torch::randint(30, {37}, torch::kInt64);
  txl::data::EncodedSplit text;
  text.ids = ids;
  const std::vector<std::int64_t> edges = {0, 1, 2, 4, 8};
  for (int mem_len : {0, 3, 6}) {
    SCOPED_TRACE(testing::Message() << "mem_len " << mem_len);
    const Settings s = memory_settings(mem_len);
    const AttentionMass mass = attention_by_distance(model, text, s, edges);
    const AttentionMass expected = counted(model, ids, s, edges);
    EXPECT_EQ(mass.queries, 36);
    EXPECT_EQ(mass.mem_len, mem_len);
    EXPECT_TRUE(txl::test::tensor_near(mass.mass, expected.mass, 1e-9, 1e-9));
    EXPECT_TRUE(txl::test::tensor_near(mass.memory, expected.memory, 1e-9, 1e-9));
    // Each layer's shares add up to one, nothing lies ahead of a query (causality), and only a
    // model with memory puts weight on it, and only then beyond the segment's reach (3).
    EXPECT_TRUE(
        txl::test::tensor_near(mass.mass.sum(1), torch::ones({mass.mass.size(0)}), 1e-6, 0));
    EXPECT_EQ(mass.future.abs().max().item<double>(), 0.0);
    EXPECT_EQ(expected.future.abs().max().item<double>(), 0.0);
    if (mem_len == 0) {
      EXPECT_EQ(mass.memory.abs().max().item<double>(), 0.0);
      EXPECT_EQ(mass.mass.select(1, 4).abs().max().item<double>(), 0.0);  // distances 8+
    } else {
      EXPECT_GT(mass.memory.min().item<double>(), 0.01);
      EXPECT_GT(mass.mass.narrow(1, 3, 2).sum(1).min().item<double>(), 0.0);  // distances 4+
    }
  }
  // Zero memory (eval.mem_init): the first segment already has mem_len keys before it, which are
  // memory, not keys ahead of the query.
  Settings zeros = memory_settings(3);
  zeros.zero_memory = true;
  const AttentionMass from_zeros = attention_by_distance(model, text, zeros, edges);
  EXPECT_EQ(from_zeros.future.abs().max().item<double>(), 0.0);
  EXPECT_EQ(from_zeros.mem_len, 3);
  EXPECT_TRUE(txl::test::tensor_near(from_zeros.mass.sum(1), torch::ones({from_zeros.mass.size(0)}),
                                     1e-6, 0));
  // The cached keys and values of the memory give the same weights.
  Settings cached = memory_settings(3);
  cached.cache_kv = true;
  EXPECT_TRUE(txl::test::tensor_near(
      attention_by_distance(model, text, cached, edges).mass,
      attention_by_distance(model, text, memory_settings(3), edges).mass, 1e-6, 1e-6));
}

TEST(AttentionByDistance, RefusesWhatHasNoDistance) {
  txl::test::TempDir dir;
  auto config = txl::test::tiny_experiment(dir.path());
  txl::models::TransformerLM model(config.model, 30);
  txl::data::EncodedSplit text;
  text.ids = torch::randint(30, {20}, torch::kInt64);
  Settings sliding = memory_settings(0);
  sliding.mode = Mode::kSliding;
  TXL_EXPECT_THROW_WITH(attention_by_distance(model, text, sliding, default_distance_edges()),
                        "not sliding");
  txl::eval::Extras observed;  // the evaluator's own refusal, under attention_by_distance's
  observed.attention = [](const std::vector<torch::Tensor>&, const txl::eval::BatchScore&) {};
  TXL_EXPECT_THROW_WITH(txl::eval::evaluate(model, text, sliding, observed),
                        "attention weights are observed in memory or segments mode");
  TXL_EXPECT_THROW_WITH(attention_by_distance(model, text, memory_settings(2), {1, 2}),
                        "must start at 0");
  config.model.mem_tokens = 2;
  txl::models::TransformerLM tokens(config.model, 30);
  TXL_EXPECT_THROW_WITH(attention_by_distance(tokens, text, memory_settings(2), {0, 1}),
                        "not with memory tokens (model.mem_tokens must be 0)");
  config.model.mem_tokens = 0;
  config.model.cmem_len = 4;
  txl::models::TransformerLM compressive(config.model, 30);
  TXL_EXPECT_THROW_WITH(attention_by_distance(compressive, text, memory_settings(2), {0, 1}),
                        "not with compressed memory (model.cmem_len must be 0)");
  EXPECT_EQ(distance_edge_name(default_distance_edges(), 2), "2-3");
  EXPECT_EQ(distance_edge_name(default_distance_edges(), 1), "1");
  EXPECT_EQ(distance_edge_name(default_distance_edges(), default_distance_edges().size() - 1),
            "1024+");
}

}  // namespace
