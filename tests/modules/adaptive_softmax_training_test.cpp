// AdaptiveLogSoftmax in training: gradients, bfloat16, checkpoints and learning a mapping.
#include "txl/modules/adaptive_softmax.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "adaptive_softmax_test_support.h"
#include "support/test_support.h"
#include "txl/modules/adaptive_embedding.h"

namespace {

using txl::modules::AdaptiveEmbedding;
using txl::modules::AdaptiveLogSoftmax;
using txl::modules::adaptive_softmax_test::all_targets;
using txl::modules::adaptive_softmax_test::describe;
using txl::modules::adaptive_softmax_test::Layout;
using txl::modules::adaptive_softmax_test::make_embedding;
using txl::modules::adaptive_softmax_test::param;
using txl::modules::adaptive_softmax_test::randomize;
using txl::modules::adaptive_softmax_test::softmax_options;

// The tied table's gradient is the sum of its input and output uses, and one optimizer step moves
// the embedding and the output layer together.
TEST(AdaptiveLogSoftmax, TiedGradientAccumulatesBothUsesAndAStepMovesBoth) {
  torch::manual_seed(13);
  const Layout layout{30, 8, 8, {10}, 1};
  auto emb = make_embedding(layout);
  AdaptiveLogSoftmax crit(softmax_options(layout), emb);
  const torch::Tensor tokens = torch::randint(30, {4, 6}, torch::kLong);  // [B, T]
  const torch::Tensor target = torch::randint(30, {4, 6}, torch::kLong);  // [B, T]
  auto loss_of = [&](AdaptiveEmbedding& e, AdaptiveLogSoftmax& c) {
    return c->nll(e(tokens), target).mean();
  };

  // The same numbers, untied: separate copies of the table for input and output.
  auto emb_copy = make_embedding(layout);
  AdaptiveLogSoftmax crit_copy(softmax_options(layout, false, false));
  {
    torch::NoGradGuard no_grad;
    emb_copy->table(0).copy_(emb->table(0));
    param(*crit_copy, "out_layers.0.weight").copy_(emb->table(0));
    param(*crit_copy, "cluster_weight").copy_(param(*crit, "cluster_weight"));
  }
  loss_of(emb_copy, crit_copy).backward();
  const torch::Tensor expected =
      emb_copy->table(0).grad() + param(*crit_copy, "out_layers.0.weight").grad();

  std::vector<torch::Tensor> params = emb->parameters();
  for (const auto& p : crit->parameters()) params.push_back(p);
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.5));
  loss_of(emb, crit).backward();
  EXPECT_TRUE(txl::test::tensor_near(emb->table(0).grad(), expected, 1e-7, 1e-5));

  const torch::Tensor before = emb->table(0).clone();
  sgd.step();
  EXPECT_TRUE(txl::test::tensor_near(emb->table(0), before - 0.5 * expected, 1e-7, 1e-5));
  EXPECT_TRUE(txl::test::tensor_equal(crit->table(0), emb->table(0)));
  EXPECT_GT((emb->table(0) - before).abs().max().item<double>(), 0.0);
}

// Every parameter, head and tail, input and output, gets a finite nonzero gradient.
TEST(AdaptiveLogSoftmax, GradientsAreFiniteAndNonzeroEverywhere) {
  torch::manual_seed(14);
  for (bool tie : {true, false}) {
    SCOPED_TRACE(tie ? "tied" : "untied");
    const Layout layout{30, 16, 12, {4, 10, 20}, 2};
    auto emb = make_embedding(layout);
    AdaptiveLogSoftmax crit(softmax_options(layout, tie, tie), emb);
    const torch::Tensor tokens = all_targets(30, 10).view({5, 8});  // [B, T]
    const torch::Tensor target = all_targets(30, 10).flip(0).view({5, 8});
    crit->nll(emb(tokens), target).sum().backward();
    for (const auto* module : {static_cast<torch::nn::Module*>(emb.get()),
                               static_cast<torch::nn::Module*>(crit.get())}) {
      for (const auto& item : module->named_parameters()) {
        const torch::Tensor& grad = item.value().grad();
        ASSERT_TRUE(grad.defined()) << item.key();
        EXPECT_TRUE(torch::isfinite(grad).all().item<bool>()) << item.key();
        EXPECT_GT(grad.abs().max().item<double>(), 0.0) << item.key();
      }
    }
  }
}

// nll runs a tail cluster only for the rows whose target is in it: targets in the head and in
// cluster 1 leave clusters 2 and 3 untouched (no gradient, and changing them changes nothing).
TEST(AdaptiveLogSoftmax, NllComputesATailOnlyForItsTargets) {
  torch::manual_seed(15);
  const Layout layout{30, 16, 12, {4, 10, 20}, 2};
  auto emb = make_embedding(layout);
  AdaptiveLogSoftmax crit(softmax_options(layout), emb);
  const torch::Tensor hidden = torch::randn({6, 12});  // [N, d_proj]
  const torch::Tensor target = torch::tensor({0, 3, 4, 9, 1, 5}, torch::kLong);
  const torch::Tensor nll = crit->nll(hidden, target);
  nll.sum().backward();
  for (std::int64_t k : {2, 3}) {
    for (const auto& p : {crit->cluster_words(k), crit->cluster_words_bias(k)}) {
      EXPECT_TRUE(!p.grad().defined() || p.grad().abs().max().item<double>() == 0.0)
          << "cluster " << k;
    }
  }
  ASSERT_TRUE(param(*crit, "out_layers.1.bias").grad().defined());
  EXPECT_GT(param(*crit, "out_layers.1.bias").grad().abs().max().item<double>(), 0.0);
  // The cluster logits of the head still see all clusters.
  EXPECT_GT(param(*crit, "cluster_bias").grad().abs().min().item<double>(), 0.0);
  {
    torch::NoGradGuard no_grad;
    emb->table(3).normal_(0.0, 5.0);
    param(*crit, "out_layers.2.bias").normal_(0.0, 5.0);
  }
  EXPECT_TRUE(txl::test::tensor_equal(crit->nll(hidden, target), nll));
}

// Central differences in double precision against autograd, for every parameter of a tiny tied
// embedding + adaptive softmax and for the hidden input (the C++ API has no gradcheck).
TEST(AdaptiveLogSoftmax, GradientsMatchFiniteDifferencesInDouble) {
  torch::manual_seed(16);
  const Layout layout{10, 4, 3, {4, 7}, 2};
  auto emb = make_embedding(layout);
  AdaptiveLogSoftmax crit(softmax_options(layout), emb);
  emb->to(torch::kDouble);  // the tied tables follow: same tensors
  crit->to(torch::kDouble);
  randomize(*emb, 0.5);
  randomize(*crit, 0.5);
  ASSERT_EQ(crit->table(1).scalar_type(), torch::kDouble);
  const torch::Tensor tokens = torch::tensor({0, 3, 4, 6, 7, 9, 2, 8}, torch::kLong);  // [N]
  const torch::Tensor target = torch::tensor({9, 7, 0, 5, 3, 4, 8, 1}, torch::kLong);  // [N]
  const torch::Tensor weights = torch::rand({8}, torch::kDouble) + 0.5;                // [N]
  torch::Tensor h0 = torch::randn({8, 3}, torch::kDouble).requires_grad_(true);  // [N, d_proj]
  auto loss = [&] { return (crit->nll(h0 + emb(tokens), target) * weights).sum(); };

  std::vector<std::pair<std::string, torch::Tensor>> inputs{{"hidden", h0}};
  for (const auto& item : emb->named_parameters())
    inputs.emplace_back("emb." + item.key(), item.value());
  for (const auto& item : crit->named_parameters())
    inputs.emplace_back("crit." + item.key(), item.value());
  loss().backward();
  const double eps = 1e-6;
  std::int64_t checked = 0;
  for (auto& [name, tensor] : inputs) {
    ASSERT_TRUE(tensor.grad().defined()) << name;
    const torch::Tensor analytic = tensor.grad().clone().view(-1);
    torch::Tensor flat = tensor.view(-1);
    for (std::int64_t i = 0; i < flat.size(0); ++i) {
      double plus, minus;
      {
        torch::NoGradGuard no_grad;
        const double original = flat[i].item<double>();
        flat[i].fill_(original + eps);
        plus = loss().item<double>();
        flat[i].fill_(original - eps);
        minus = loss().item<double>();
        flat[i].fill_(original);
      }
      const double numeric = (plus - minus) / (2 * eps);
      const double expected = analytic[i].item<double>();
      EXPECT_NEAR(expected, numeric, 1e-7 + 1e-6 * std::abs(numeric)) << name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
}

// RAII switch for CPU autocast to bfloat16, spelled for LibTorch 1.13 .. 2.3 and 2.4+.
class CpuAutocastBf16 {
 public:
  CpuAutocastBf16() {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    at::autocast::set_autocast_enabled(at::kCPU, true);
#else
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    at::autocast::set_cpu_enabled(true);
#endif
  }
  ~CpuAutocastBf16() {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_enabled(at::kCPU, false);
#else
    at::autocast::set_cpu_enabled(false);
#endif
    at::autocast::clear_cache();
  }
  CpuAutocastBf16(const CpuAutocastBf16&) = delete;
  CpuAutocastBf16& operator=(const CpuAutocastBf16&) = delete;
};

// Under bf16 autocast the projections and logits run in bf16, every log-softmax in fp32: the
// result is fp32, normalised to fp32 accuracy, and within bf16 rounding of the fp32 answer. The
// same holds for a module converted to bf16 as a whole.
TEST(AdaptiveLogSoftmax, WorksInBfloat16UnderAutocastAndConverted) {
  torch::manual_seed(17);
  for (const Layout& layout : {Layout{300, 32, 24, {50, 150}, 2}, Layout{300, 32, 32, {}, 1}}) {
    SCOPED_TRACE(describe(layout));
    auto emb = make_embedding(layout);
    AdaptiveLogSoftmax crit(softmax_options(layout), emb);
    randomize(*emb, 0.2);
    randomize(*crit, 0.2);
    const torch::Tensor tokens = torch::randint(300, {4, 16}, torch::kLong);  // [B, T]
    const torch::Tensor target = all_targets(300, 20).view({5, 64});          // [B', T']
    const torch::Tensor hidden = torch::randn({5, 64, layout.d_proj});        // [B', T', d_proj]
    torch::NoGradGuard no_grad;
    const torch::Tensor emb_ref = emb(tokens);
    const torch::Tensor nll_ref = crit->nll(hidden, target);
    torch::Tensor emb_amp, nll_amp, log_prob_amp;
    {
      CpuAutocastBf16 autocast;
      emb_amp = emb(tokens);
      nll_amp = crit->nll(hidden, target);
      log_prob_amp = crit->log_prob(hidden.view({-1, layout.d_proj}));
    }
    if (emb->projection(0).defined()) {
      EXPECT_EQ(emb_amp.scalar_type(), torch::kBFloat16) << "autocast was not active";
    }
    EXPECT_TRUE(txl::test::tensor_near(emb_amp, emb_ref, 0.01, 0.01));
    EXPECT_EQ(nll_amp.scalar_type(), torch::kFloat);
    EXPECT_EQ(log_prob_amp.scalar_type(), torch::kFloat);
    EXPECT_TRUE(txl::test::tensor_near(nll_amp, nll_ref, 0.05, 0));
    EXPECT_TRUE(txl::test::tensor_near(log_prob_amp.exp().sum(1), torch::ones({320}), 1e-5, 0));

    emb->to(torch::kBFloat16);
    crit->to(torch::kBFloat16);
    const torch::Tensor nll_bf16 = crit->nll(hidden.to(torch::kBFloat16), target);
    EXPECT_EQ(emb(tokens).scalar_type(), torch::kBFloat16);
    EXPECT_EQ(nll_bf16.scalar_type(), torch::kFloat);
    EXPECT_TRUE(txl::test::tensor_near(nll_bf16, nll_ref, 0.05, 0));
  }
}

// Save and load through torch::save/torch::load: the loaded pair is still tied (the load writes
// into the embedding's tensors, which the softmax holds) and scores identically.
TEST(AdaptiveLogSoftmax, CheckpointRoundTripKeepsTheTie) {
  torch::manual_seed(18);
  txl::test::TempDir dir;
  const Layout layout{30, 16, 12, {4, 10, 20}, 2};
  auto emb = make_embedding(layout);
  AdaptiveLogSoftmax crit(softmax_options(layout), emb);
  randomize(*emb, 0.3);
  randomize(*crit, 0.3);
  torch::save(emb, (dir / "emb.pt").string());
  torch::save(crit, (dir / "crit.pt").string());

  auto emb2 = make_embedding(layout);
  AdaptiveLogSoftmax crit2(softmax_options(layout), emb2);
  torch::load(emb2, (dir / "emb.pt").string());
  torch::load(crit2, (dir / "crit.pt").string());
  for (std::int64_t t = 0; t < emb2->num_tables(); ++t) {
    EXPECT_EQ(crit2->table(t).data_ptr(), emb2->table(t).data_ptr());
    EXPECT_TRUE(txl::test::tensor_equal(crit2->table(t), emb->table(t)));
  }
  const torch::Tensor hidden = torch::randn({40, 12});
  const torch::Tensor target = all_targets(30, 10);
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(txl::test::tensor_equal(crit2->nll(hidden, target), crit->nll(hidden, target)));
}

// A tied adaptive embedding + adaptive softmax (with a linear map between, as the network would
// be) learns the fixed mapping x -> (7 x + 3) mod V over every id to near-zero loss with Adam.
TEST(AdaptiveLogSoftmax, LearnsAFixedTokenMapping) {
  torch::manual_seed(20);
  const Layout layout{64, 32, 32, {8, 24}, 2};
  auto emb = make_embedding(layout);
  AdaptiveLogSoftmax crit(softmax_options(layout), emb);
  torch::nn::Linear mix(32, 32);
  const torch::Tensor tokens = torch::arange(64, torch::kLong);  // [N]
  const torch::Tensor target = (tokens * 7 + 3) % 64;            // [N]
  std::vector<torch::Tensor> params = emb->parameters();
  for (const auto& p : crit->parameters()) params.push_back(p);
  for (const auto& p : mix->parameters()) params.push_back(p);
  torch::optim::Adam adam(params, torch::optim::AdamOptions(1e-2));
  auto loss_of = [&] { return crit->nll(mix(emb(tokens)), target).mean(); };
  // At init (small weights) every softmax is near uniform: the head spreads 1/10 over 8 words and
  // 2 clusters, cluster 1 then 1/16 over its words, cluster 2 1/40.
  const double initial = loss_of().item<double>();
  const double uniform = (8 * std::log(10.0) + 16 * std::log(160.0) + 40 * std::log(400.0)) / 64;
  EXPECT_NEAR(initial, uniform, 0.05);
  double loss = initial;
  for (int step = 0; step < 300; ++step) {
    adam.zero_grad();
    torch::Tensor l = loss_of();
    l.backward();
    adam.step();
    loss = l.item<double>();
  }
  EXPECT_LT(loss, 0.02) << "from " << initial;
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(txl::test::tensor_equal(crit->log_prob(mix(emb(tokens))).argmax(1), target));
}

// Micro-benchmark, not a test: build/bin/modules_adaptive_test --gtest_also_run_disabled_tests
// --gtest_filter='*Benchmark*'. nll forward and forward+backward for N = 2048, d = 256, V = 12871.
TEST(AdaptiveLogSoftmax, DISABLED_BenchmarkNll) {
  torch::manual_seed(21);
  for (const Layout& layout :
       {Layout{12871, 256, 256, {}, 1}, Layout{12871, 256, 256, {2000, 6000}, 2}}) {
    auto emb = make_embedding(layout);
    AdaptiveLogSoftmax crit(softmax_options(layout), emb);
    const torch::Tensor hidden = torch::randn({2048, 256}).requires_grad_(true);
    // Zipf-like targets: most in the head, as in real text.
    const torch::Tensor target =
        (torch::rand({2048}).pow(4) * 12871).to(torch::kLong).clamp_max(12870);
    auto time_ms = [&](bool backward) {
      const int reps = 10;
      for (int i = 0; i < 2; ++i) crit->nll(hidden, target).sum().backward();
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < reps; ++i) {
        if (backward) {
          crit->nll(hidden, target).sum().backward();
        } else {
          torch::NoGradGuard no_grad;
          crit->nll(hidden, target);
        }
      }
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                 .count() /
             reps;
    };
    // The floor: the logits of the full vocabulary alone, one [N, d] x [d, V] product.
    const torch::Tensor full_table = torch::randn({12871, 256});  // [V, d]
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 10; ++i) {
      torch::NoGradGuard no_grad;
      torch::linear(hidden, full_table);  // [N, V]
    }
    const double full_logits_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count() /
        10;
    std::printf(
        "[bench] %s threads %d: nll %.1f ms, nll+backward %.1f ms (full [N, V] logits alone %.1f "
        "ms)\n",
        describe(layout).c_str(), torch::get_num_threads(), time_ms(false), time_ms(true),
        full_logits_ms);
  }
}

}  // namespace
