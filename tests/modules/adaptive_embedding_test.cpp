#include "txl/modules/adaptive_embedding.h"

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace {

using txl::modules::AdaptiveEmbedding;
using txl::modules::AdaptiveEmbeddingOptions;

AdaptiveEmbeddingOptions options(std::int64_t n_token, std::int64_t d_embed, std::int64_t d_proj,
                                 std::vector<std::int64_t> cutoffs, std::int64_t div_val) {
  AdaptiveEmbeddingOptions o;
  o.n_token = n_token;
  o.d_embed = d_embed;
  o.d_proj = d_proj;
  o.cutoffs = std::move(cutoffs);
  o.div_val = div_val;
  return o;
}

std::map<std::string, std::vector<std::int64_t>> parameter_shapes(const torch::nn::Module& module) {
  std::map<std::string, std::vector<std::int64_t>> shapes;
  for (const auto& item : module.named_parameters())
    shapes[item.key()] = item.value().sizes().vec();
  return shapes;
}

// The checkpoint keys are an interface (the model's state dict, converters from the paper code):
// pinned here for the three layouts.
TEST(AdaptiveEmbedding, ParameterNamesAndShapesArePinned) {
  using Shapes = std::map<std::string, std::vector<std::int64_t>>;
  EXPECT_EQ(parameter_shapes(*AdaptiveEmbedding(options(12, 8, 8, {}, 1))),
            (Shapes{{"emb_layers.0.weight", {12, 8}}}));
  EXPECT_EQ(parameter_shapes(*AdaptiveEmbedding(options(12, 8, 6, {4, 8}, 1))),
            (Shapes{{"emb_layers.0.weight", {12, 8}}, {"emb_projs.0", {6, 8}}}));
  EXPECT_EQ(parameter_shapes(*AdaptiveEmbedding(options(12, 8, 6, {4, 8}, 2))),
            (Shapes{{"emb_layers.0.weight", {4, 8}},
                    {"emb_layers.1.weight", {4, 4}},
                    {"emb_layers.2.weight", {4, 2}},
                    {"emb_projs.0", {6, 8}},
                    {"emb_projs.1", {6, 4}},
                    {"emb_projs.2", {6, 2}}}));
}

// Every id of the vocabulary, in a shuffled [B, T] batch with repeats, against the definition:
// table_k[id - c_{k-1}] projected by P_k, times sqrt(d_proj).
TEST(AdaptiveEmbedding, OutputIsTheClusterRowProjectedAndScaled) {
  torch::manual_seed(1);
  struct Case {
    std::int64_t d_embed, d_proj;
    std::vector<std::int64_t> cutoffs;
    std::int64_t div_val;
  };
  const std::vector<Case> cases{
      {8, 8, {}, 1}, {8, 6, {5}, 1}, {8, 6, {4, 9, 15}, 2}, {16, 6, {3, 11}, 4}, {8, 8, {}, 2}};
  const std::int64_t n_token = 20;
  for (const auto& c : cases) {
    SCOPED_TRACE("div_val " + std::to_string(c.div_val) + ", " + std::to_string(c.cutoffs.size()) +
                 " cutoffs, d_proj " + std::to_string(c.d_proj));
    AdaptiveEmbedding emb(options(n_token, c.d_embed, c.d_proj, c.cutoffs, c.div_val));
    const torch::Tensor ids = torch::cat({torch::randperm(n_token, torch::kLong),
                                          torch::randint(n_token, {12}, torch::kLong)})
                                  .view({4, 8});  // [B, T]
    const torch::Tensor out = emb(ids);           // [B, T, d_proj]
    ASSERT_EQ(out.sizes(), (std::vector<std::int64_t>{4, 8, c.d_proj}));

    std::vector<std::int64_t> bounds{0};
    for (auto x : c.cutoffs) bounds.push_back(x);
    bounds.push_back(n_token);
    const double scale = std::sqrt(static_cast<double>(c.d_proj));
    auto flat_ids = ids.view(-1);
    auto flat_out = out.view({-1, c.d_proj});
    for (std::int64_t i = 0; i < flat_ids.size(0); ++i) {
      const std::int64_t id = flat_ids[i].item<std::int64_t>();
      std::int64_t k = 0;
      while (id >= bounds[k + 1]) ++k;
      torch::Tensor row, proj;
      if (c.div_val == 1) {
        row = emb->table(0)[id];
        proj = emb->projection(0);
      } else {
        row = emb->table(k)[id - bounds[k]];
        proj = emb->projection(k);
      }
      torch::Tensor expected = proj.defined() ? torch::mv(proj, row) : row;  // [d_proj]
      ASSERT_TRUE(txl::test::tensor_near(flat_out[i], expected * scale, 1e-6, 1e-5))
          << "token " << id;
    }
  }
}

TEST(AdaptiveEmbedding, WidthsShrinkByDivVal) {
  AdaptiveEmbedding emb(options(100, 64, 32, {10, 30, 60}, 4));
  ASSERT_EQ(emb->num_tables(), 4);
  const std::vector<std::int64_t> widths{64, 16, 4, 1};
  const std::vector<std::int64_t> rows{10, 20, 30, 40};
  for (std::int64_t k = 0; k < 4; ++k) {
    EXPECT_EQ(emb->table(k).sizes(), (std::vector<std::int64_t>{rows[k], widths[k]}));
    EXPECT_EQ(emb->projection(k).sizes(), (std::vector<std::int64_t>{32, widths[k]}));
  }
  EXPECT_DOUBLE_EQ(emb->scale(), std::sqrt(32.0));
}

// Only the clusters that occur get a gradient, and the ones that do get a finite, nonzero one.
TEST(AdaptiveEmbedding, GradientsReachExactlyTheUsedClusters) {
  torch::manual_seed(2);
  AdaptiveEmbedding emb(options(30, 8, 6, {10, 20}, 2));
  const torch::Tensor ids =
      torch::tensor({{0, 5, 25}, {29, 9, 3}}, torch::kLong);  // clusters 0 and 2 only
  emb(ids).pow(2).sum().backward();
  for (std::int64_t k : {0, 2}) {
    for (const auto& p : {emb->table(k), emb->projection(k)}) {
      ASSERT_TRUE(p.grad().defined()) << "cluster " << k;
      EXPECT_TRUE(torch::isfinite(p.grad()).all().item<bool>());
      EXPECT_GT(p.grad().abs().sum().item<double>(), 0.0) << "cluster " << k;
    }
  }
  // Rows of ids that did not occur stay at zero gradient.
  EXPECT_EQ(emb->table(0).grad()[1].abs().sum().item<double>(), 0.0);
  for (const auto& p : {emb->table(1), emb->projection(1)}) {
    EXPECT_TRUE(!p.grad().defined() || p.grad().abs().sum().item<double>() == 0.0);
  }
}

TEST(AdaptiveEmbedding, OutOfRangeIdsNameTheIdAndTheVocabulary) {
  AdaptiveEmbedding single(options(12, 8, 8, {}, 1));
  AdaptiveEmbedding clustered(options(12, 8, 6, {4, 8}, 2));
  for (auto* emb : {&single, &clustered}) {
    TXL_EXPECT_THROW_WITH((*emb)(torch::tensor({{1, 12, 3}}, torch::kLong)),
                          "token id 12 is outside the vocabulary [0, 12)");
    TXL_EXPECT_THROW_WITH((*emb)(torch::tensor({{1, 2, -3}}, torch::kLong)),
                          "token id -3 is outside the vocabulary [0, 12)");
    TXL_EXPECT_THROW_WITH((*emb)(torch::tensor({{1, 2}}, torch::kInt)), "token ids must be int64");
  }
  // The boundary ids themselves are valid.
  EXPECT_NO_THROW(clustered(torch::tensor({{0, 3, 4, 7, 8, 11}}, torch::kLong)));
}

TEST(AdaptiveEmbedding, BadOptionsAreRejectedWithTheFix) {
  TXL_EXPECT_THROW_WITH(AdaptiveEmbedding(options(12, 8, 8, {8, 4}, 1)),
                        "must be strictly increasing");
  TXL_EXPECT_THROW_WITH(AdaptiveEmbedding(options(12, 8, 8, {4, 12}, 1)),
                        "inside (0, n_token = 12)");
  TXL_EXPECT_THROW_WITH(AdaptiveEmbedding(options(12, 8, 8, {0}, 1)), "cutoffs = [0]");
  TXL_EXPECT_THROW_WITH(AdaptiveEmbedding(options(12, 8, 8, {3, 6, 9}, 4)),
                        "leaves cluster 2 a width of d_embed / 4^2 = 0");
  TXL_EXPECT_THROW_WITH(AdaptiveEmbedding(options(0, 8, 8, {}, 1)), "n_token = 0 must be positive");
  TXL_EXPECT_THROW_WITH(AdaptiveEmbedding(options(12, 8, 8, {}, 0)), "div_val = 0 must be >= 1");
  auto bad_init = options(12, 8, 8, {}, 1);
  bad_init.init = "xavier";
  TXL_EXPECT_THROW_WITH(AdaptiveEmbedding{bad_init},
                        "init = \"xavier\" is not one of: normal, uniform");
}

// init = normal draws N(0, init_std) tables and N(0, proj_init_std) projections; uniform draws
// U(-init_std, init_std) (std init_std / sqrt(3)).
TEST(AdaptiveEmbedding, InitialisationFollowsTheOptions) {
  torch::manual_seed(3);
  auto o = options(4000, 64, 32, {}, 2);
  AdaptiveEmbedding normal(o);
  EXPECT_NEAR(normal->table(0).std().item<double>(), 0.02, 0.001);
  EXPECT_NEAR(normal->table(0).mean().item<double>(), 0.0, 0.001);
  EXPECT_NEAR(normal->projection(0).std().item<double>(), 0.01, 0.001);
  o.init = "uniform";
  o.init_std = 0.1;
  AdaptiveEmbedding uniform(o);
  EXPECT_LE(uniform->table(0).abs().max().item<double>(), 0.1);
  EXPECT_NEAR(uniform->table(0).std().item<double>(), 0.1 / std::sqrt(3.0), 0.002);
}

}  // namespace
