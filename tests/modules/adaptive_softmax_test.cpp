// AdaptiveLogSoftmax's numbers and layout: normalisation, the formula, parameters, tying, errors.
#include "txl/modules/adaptive_softmax.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "adaptive_softmax_test_support.h"
#include "support/test_support.h"
#include "txl/modules/adaptive_embedding.h"

namespace {

using txl::modules::AdaptiveLogSoftmax;
using txl::modules::adaptive_softmax_test::all_targets;
using txl::modules::adaptive_softmax_test::describe;
using txl::modules::adaptive_softmax_test::Layout;
using txl::modules::adaptive_softmax_test::make_embedding;
using txl::modules::adaptive_softmax_test::param;
using txl::modules::adaptive_softmax_test::randomize;
using txl::modules::adaptive_softmax_test::softmax_options;

std::map<std::string, std::vector<std::int64_t>> parameter_shapes(const torch::nn::Module& module) {
  std::map<std::string, std::vector<std::int64_t>> shapes;
  for (const auto& item : module.named_parameters())
    shapes[item.key()] = item.value().sizes().vec();
  return shapes;
}

const std::vector<Layout>& normalisation_layouts() {
  static const std::vector<Layout> layouts = [] {
    std::vector<Layout> all;
    for (const auto& cutoffs : std::vector<std::vector<std::int64_t>>{{}, {8}, {4, 10, 20}}) {
      for (std::int64_t div_val : {1, 2, 4}) {
        for (std::int64_t d_proj : {64, 48}) all.push_back({30, 64, d_proj, cutoffs, div_val});
      }
    }
    return all;
  }();
  return layouts;
}

// exp(log p) sums to 1 over the whole vocabulary, for no, one and three tail clusters, div_val 1,
// 2, 4, with and without projections; nll is -log_prob at the target.
TEST(AdaptiveLogSoftmax, LogProbSumsToOneAndNllIsItsTargetEntry) {
  torch::manual_seed(10);
  for (const auto& layout : normalisation_layouts()) {
    SCOPED_TRACE(describe(layout));
    auto emb = make_embedding(layout);
    AdaptiveLogSoftmax crit(softmax_options(layout), emb);
    randomize(*emb, 0.3);
    randomize(*crit, 0.3);
    const torch::Tensor target = all_targets(layout.n_token, 10);                // [N]
    const torch::Tensor hidden = torch::randn({target.size(0), layout.d_proj});  // [N, d_proj]
    torch::NoGradGuard no_grad;
    const torch::Tensor log_prob = crit->log_prob(hidden);  // [N, V]
    ASSERT_EQ(log_prob.sizes(), (std::vector<std::int64_t>{target.size(0), layout.n_token}));
    EXPECT_TRUE(
        txl::test::tensor_near(log_prob.exp().sum(1), torch::ones({target.size(0)}), 1e-5, 0));
    // Far from uniform, or the check above would be weak.
    EXPECT_GT(log_prob.exp().max().item<double>(), 5.0 / layout.n_token);
    const torch::Tensor nll = crit->nll(hidden, target);  // [N]
    EXPECT_TRUE(txl::test::tensor_near(nll, -log_prob.gather(1, target.unsqueeze(1)).squeeze(1),
                                       1e-5, 1e-5));
  }
}

// Without cutoffs the output layer is the plain tied softmax log_softmax(h [P] E^T + b).
TEST(AdaptiveLogSoftmax, NoCutoffsIsThePlainSoftmaxOfTheTiedTable) {
  torch::manual_seed(11);
  for (std::int64_t d_proj : {16, 12}) {
    SCOPED_TRACE("d_proj " + std::to_string(d_proj));
    const Layout layout{50, 16, d_proj, {}, 1};
    auto emb = make_embedding(layout);
    AdaptiveLogSoftmax crit(softmax_options(layout), emb);
    randomize(*emb, 0.3);
    randomize(*crit, 0.3);
    const torch::Tensor target = all_targets(50, 14);         // [N]
    const torch::Tensor hidden = torch::randn({64, d_proj});  // [N, d_proj]
    torch::Tensor projected = hidden;                         // [N, d_embed]
    if (d_proj != 16) projected = hidden.matmul(param(*crit, "out_projs.0"));
    const torch::Tensor logits =
        projected.matmul(emb->table(0).t()) + param(*crit, "out_layers.0.bias");  // [N, V]
    const torch::Tensor expected =
        -torch::log_softmax(logits, 1).gather(1, target.unsqueeze(1)).squeeze(1);
    EXPECT_TRUE(txl::test::tensor_near(crit->nll(hidden, target), expected, 1e-5, 1e-5));
    EXPECT_TRUE(
        txl::test::tensor_near(crit->log_prob(hidden), torch::log_softmax(logits, 1), 1e-5, 1e-5));
  }
}

// Grave et al. written out row by row from the registered parameters: head softmax over the head
// words and one logit per tail cluster (cluster k in column c_1 + n - k, the paper code's order),
// tail words log p(cluster) + log p(word | cluster) through the embedding's tables and projections.
TEST(AdaptiveLogSoftmax, ClusteredLogProbMatchesTheTwoLevelFormula) {
  torch::manual_seed(12);
  const Layout layout{30, 16, 12, {4, 10, 20}, 2};
  const std::vector<std::int64_t> bounds{0, 4, 10, 20, 30};
  auto emb = make_embedding(layout);
  AdaptiveLogSoftmax crit(softmax_options(layout), emb);
  randomize(*emb, 0.3);
  randomize(*crit, 0.3);
  const torch::Tensor hidden = torch::randn({5, 12});  // [N, d_proj]
  torch::NoGradGuard no_grad;
  const torch::Tensor head_weight =
      torch::cat({param(*emb, "emb_layers.0.weight"), param(*crit, "cluster_weight")});
  const torch::Tensor head_bias =
      torch::cat({param(*crit, "out_layers.0.bias"), param(*crit, "cluster_bias")});
  const torch::Tensor head = torch::log_softmax(
      hidden.matmul(param(*crit, "out_projs.0")).matmul(head_weight.t()) + head_bias,
      1);  // [N, 4 + 3]
  torch::Tensor expected = torch::empty({5, 30});
  for (std::int64_t k = 0; k < 4; ++k) {
    const std::string i = std::to_string(k);
    if (k == 0) {
      expected.narrow(1, 0, 4).copy_(head.narrow(1, 0, 4));
      continue;
    }
    const torch::Tensor tail =
        torch::log_softmax(hidden.matmul(param(*emb, "emb_projs." + i))
                                   .matmul(param(*emb, "emb_layers." + i + ".weight").t()) +
                               param(*crit, "out_layers." + i + ".bias"),
                           1);  // [N, V_k]
    expected.narrow(1, bounds[k], bounds[k + 1] - bounds[k])
        .copy_(tail + head.narrow(1, 4 + 3 - k, 1));
  }
  EXPECT_TRUE(txl::test::tensor_near(crit->log_prob(hidden), expected, 1e-5, 1e-5));
  const torch::Tensor target = torch::tensor({0, 5, 12, 29, 19}, torch::kLong);
  EXPECT_TRUE(txl::test::tensor_near(
      crit->nll(hidden, target), -expected.gather(1, target.unsqueeze(1)).squeeze(1), 1e-5, 1e-5));
}

TEST(AdaptiveLogSoftmax, ParameterNamesAndShapesArePinned) {
  using Shapes = std::map<std::string, std::vector<std::int64_t>>;
  const Layout clustered{12, 8, 6, {4, 8}, 2};
  auto emb = make_embedding(clustered);
  EXPECT_EQ(parameter_shapes(*AdaptiveLogSoftmax(softmax_options(clustered), emb)),
            (Shapes{{"out_layers.0.bias", {4}},
                    {"out_layers.1.bias", {4}},
                    {"out_layers.2.bias", {4}},
                    {"out_projs.0", {6, 8}},
                    {"cluster_weight", {2, 8}},
                    {"cluster_bias", {2}}}));
  EXPECT_EQ(parameter_shapes(*AdaptiveLogSoftmax(softmax_options(clustered, false, false))),
            (Shapes{{"out_layers.0.weight", {4, 8}},
                    {"out_layers.0.bias", {4}},
                    {"out_layers.1.weight", {4, 4}},
                    {"out_layers.1.bias", {4}},
                    {"out_layers.2.weight", {4, 2}},
                    {"out_layers.2.bias", {4}},
                    {"out_projs.0", {6, 8}},
                    {"out_projs.1", {6, 4}},
                    {"out_projs.2", {6, 2}},
                    {"cluster_weight", {2, 8}},
                    {"cluster_bias", {2}}}));
  const Layout plain{12, 8, 8, {}, 1};
  EXPECT_EQ(parameter_shapes(*AdaptiveLogSoftmax(softmax_options(plain), make_embedding(plain))),
            (Shapes{{"out_layers.0.bias", {12}}}));
  const Layout single_table{12, 8, 6, {4, 8}, 1};
  EXPECT_EQ(parameter_shapes(
                *AdaptiveLogSoftmax(softmax_options(single_table), make_embedding(single_table))),
            (Shapes{{"out_layers.0.bias", {12}},
                    {"out_projs.0", {6, 8}},
                    {"cluster_weight", {2, 8}},
                    {"cluster_bias", {2}}}));
}

// Tied tables are the embedding's tensors (same storage); tail projections are shared, the head
// projection is the softmax's own; a model's parameter list holds every tensor once.
TEST(AdaptiveLogSoftmax, TyingSharesTheEmbeddingTensors) {
  for (const Layout& layout :
       {Layout{12, 8, 6, {4, 8}, 2}, Layout{12, 8, 6, {4, 8}, 1}, Layout{12, 8, 8, {}, 1}}) {
    SCOPED_TRACE(describe(layout));
    auto emb = make_embedding(layout);
    AdaptiveLogSoftmax crit(softmax_options(layout), emb);
    EXPECT_TRUE(crit->weight_tied());
    for (std::int64_t t = 0; t < emb->num_tables(); ++t) {
      EXPECT_EQ(crit->table(t).data_ptr(), emb->table(t).data_ptr());
      EXPECT_TRUE(crit->table(t).is_same(emb->table(t)));
    }
    for (std::int64_t k = 1; k < crit->layout().n_clusters(); ++k) {
      const torch::Tensor& shared = emb->projection(layout.div_val == 1 ? 0 : k);
      if (!shared.defined()) continue;
      EXPECT_TRUE(crit->projection(k).is_same(shared)) << "cluster " << k;
    }
    if (crit->projection(0).defined()) {
      EXPECT_NE(crit->projection(0).data_ptr(), emb->projection(0).data_ptr());
    }

    std::set<const void*> seen;
    std::vector<torch::Tensor> all = emb->parameters();
    for (const auto& p : crit->parameters()) all.push_back(p);
    for (const auto& p : all)
      EXPECT_TRUE(seen.insert(p.unsafeGetTensorImpl()).second) << "a parameter is listed twice";

    AdaptiveLogSoftmax untied(softmax_options(layout, false, false));
    EXPECT_FALSE(untied->weight_tied());
    EXPECT_NE(untied->table(0).data_ptr(), emb->table(0).data_ptr());
  }
}

// hidden [B, Q, d_proj] with target [B, Q] is the flat call reshaped.
TEST(AdaptiveLogSoftmax, AcceptsLeadingDimensions) {
  torch::manual_seed(19);
  const Layout layout{30, 16, 12, {4, 10, 20}, 2};
  auto emb = make_embedding(layout);
  AdaptiveLogSoftmax crit(softmax_options(layout), emb);
  const torch::Tensor hidden = torch::randn({2, 5, 12});
  const torch::Tensor target = torch::randint(30, {2, 5}, torch::kLong);
  torch::NoGradGuard no_grad;
  const torch::Tensor nll = crit->nll(hidden, target);
  ASSERT_EQ(nll.sizes(), (std::vector<std::int64_t>{2, 5}));
  EXPECT_TRUE(
      txl::test::tensor_equal(nll.view(-1), crit->nll(hidden.view({10, 12}), target.view(-1))));
  EXPECT_EQ(crit->log_prob(hidden).sizes(), (std::vector<std::int64_t>{2, 5, 30}));
  // Empty batches pass through with empty results.
  EXPECT_EQ(crit->nll(torch::randn({0, 12}), torch::zeros({0}, torch::kLong)).sizes(),
            (std::vector<std::int64_t>{0}));
  EXPECT_EQ(emb(torch::zeros({2, 0}, torch::kLong)).sizes(), (std::vector<std::int64_t>{2, 0, 12}));
}

TEST(AdaptiveLogSoftmax, BadInputsAndOptionsGiveTheMessage) {
  const Layout layout{30, 16, 12, {4, 10, 20}, 2};
  auto emb = make_embedding(layout);
  AdaptiveLogSoftmax crit(softmax_options(layout), emb);
  const torch::Tensor hidden = torch::randn({3, 12});
  TXL_EXPECT_THROW_WITH(crit->nll(hidden, torch::tensor({1, 30, 2}, torch::kLong)),
                        "token id 30 is outside the vocabulary [0, 30)");
  TXL_EXPECT_THROW_WITH(crit->nll(hidden, torch::tensor({-1, 3, 2}, torch::kLong)),
                        "token id -1 is outside the vocabulary [0, 30)");
  TXL_EXPECT_THROW_WITH(crit->nll(hidden, torch::tensor({1, 2}, torch::kLong)),
                        "must have the leading shape of hidden");
  TXL_EXPECT_THROW_WITH(crit->nll(torch::randn({3, 16}), torch::tensor({1, 2, 3}, torch::kLong)),
                        "hidden must be [N, 12]");
  TXL_EXPECT_THROW_WITH(crit->log_prob(torch::randn({3, 16})), "hidden must be [N, 12]");
  TXL_EXPECT_THROW_WITH(AdaptiveLogSoftmax{softmax_options(layout)},
                        "needs the AdaptiveEmbedding to tie to");
  const Layout other{30, 16, 12, {4, 10}, 2};
  TXL_EXPECT_THROW_WITH(AdaptiveLogSoftmax(softmax_options(other), emb),
                        "cannot tie to an AdaptiveEmbedding with another layout");
  auto bad = softmax_options(layout, false, false);
  bad.init = "zeros";
  TXL_EXPECT_THROW_WITH(AdaptiveLogSoftmax{bad}, "init = \"zeros\" is not one of: normal, uniform");
  // Untied without cutoffs or projections needs no embedding.
  EXPECT_NO_THROW(AdaptiveLogSoftmax{softmax_options(Layout{30, 16, 16, {}, 1}, false, true)});
}

}  // namespace
