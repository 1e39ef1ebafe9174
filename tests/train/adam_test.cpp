// train::make_optimizer's Adam and AdamW (one pass per parameter, ops::adam_update) against
// LibTorch's torch::optim::Adam and AdamW on the same parameters and gradients: ten steps, with
// and without weight decay, at odd sizes (a scalar, 41, 7 x 13, 600,007: chunks of 2^18 for
// threads) and a parameter whose gradient is missing on some steps. fp64 agrees to 1e-10; fp32 to
// its rounding (LibTorch's vectorized add fuses a product into the sum, the one pass does not). The
// state is LibTorch's own: same step counts and moments, so checkpoints are unchanged.
#include "txl/train/adam.h"

#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "txl/config/config.h"
#include "txl/train/trainer.h"
#include "txl/util/compat.h"

namespace {

std::vector<torch::Tensor> random_parameters(torch::ScalarType dtype) {
  torch::manual_seed(3);
  std::vector<torch::Tensor> params;
  for (auto shape : std::vector<std::vector<int64_t>>{{}, {41}, {7, 13}, {600007}}) {
    params.push_back((torch::randn(shape, torch::kDouble) * 0.3).to(dtype).requires_grad_());
  }
  return params;
}

std::vector<torch::Tensor> copies(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> out;
  for (const auto& p : params) out.push_back(p.detach().clone().requires_grad_());
  return out;
}

// Ten steps of both optimizers on the same gradients (std 30; parameter 1 has none on steps 3
// and 4); returns the largest max|a - b| / max|b| over the parameters and moments (a moment's
// entry can be a near-cancelled difference, so each tensor is measured by its largest entry).
template <typename Ours, typename Theirs, typename Options>
double largest_difference(torch::ScalarType dtype, Options options) {
  auto mine = random_parameters(dtype);
  auto theirs = copies(mine);
  Ours ours_opt(mine, options);
  Theirs their_opt(theirs, options);
  torch::manual_seed(4);
  for (int step = 0; step < 10; ++step) {
    for (size_t i = 0; i < mine.size(); ++i) {
      if (i == 1 && (step == 3 || step == 4)) {
        mine[i].mutable_grad() = torch::Tensor();
        theirs[i].mutable_grad() = torch::Tensor();
        continue;
      }
      auto g = (torch::randn(mine[i].sizes(), torch::kDouble) * 30).to(dtype);
      mine[i].mutable_grad() = g.clone();
      theirs[i].mutable_grad() = g.clone();
    }
    ours_opt.step();
    their_opt.step();
  }
  double worst = 0;
  auto compare = [&](const torch::Tensor& a, const torch::Tensor& b) {
    const auto a64 = a.to(torch::kDouble), b64 = b.to(torch::kDouble);
    const double d =
        (a64 - b64).abs().max().template item<double>() / b64.abs().max().template item<double>();
    worst = std::max(worst, d);
  };
  for (size_t i = 0; i < mine.size(); ++i) {
    compare(mine[i].detach(), theirs[i].detach());
    using State = std::conditional_t<std::is_same_v<Options, torch::optim::AdamOptions>,
                                     torch::optim::AdamParamState, torch::optim::AdamWParamState>;
    const auto& a =
        static_cast<const State&>(*ours_opt.state().at(txl::compat::optimizer_state_key(mine[i])));
    const auto& b = static_cast<const State&>(
        *their_opt.state().at(txl::compat::optimizer_state_key(theirs[i])));
    EXPECT_EQ(a.step(), b.step()) << "parameter " << i;
    EXPECT_EQ(a.step(), i == 1 ? 8 : 10);
    compare(a.exp_avg(), b.exp_avg());
    compare(a.exp_avg_sq(), b.exp_avg_sq());
  }
  return worst;
}

TEST(OnePassAdam, EqualsLibTorchsAdam) {
  for (double wd : {0.0, 0.01}) {
    SCOPED_TRACE(::testing::Message() << "weight decay " << wd);
    const auto options = torch::optim::AdamOptions(3e-3).weight_decay(wd);
    EXPECT_LT(
        (largest_difference<txl::train::OnePassAdam, torch::optim::Adam>(torch::kDouble, options)),
        1e-10);
    EXPECT_LT(
        (largest_difference<txl::train::OnePassAdam, torch::optim::Adam>(torch::kFloat, options)),
        1e-6);
  }
}

TEST(OnePassAdam, AdamWEqualsLibTorchsAdamW) {
  for (double wd : {0.0, 0.1}) {
    SCOPED_TRACE(::testing::Message() << "weight decay " << wd);
    const auto options = torch::optim::AdamWOptions(3e-3).weight_decay(wd);
    EXPECT_LT((largest_difference<txl::train::OnePassAdamW, torch::optim::AdamW>(torch::kDouble,
                                                                                 options)),
              1e-10);
    EXPECT_LT(
        (largest_difference<txl::train::OnePassAdamW, torch::optim::AdamW>(torch::kFloat, options)),
        1e-6);
  }
}

// A control: the check sees a different optimizer (Adam's weight decay against AdamW's).
TEST(OnePassAdam, TheComparisonSeesAnotherRule) {
  auto mine = random_parameters(torch::kDouble);
  auto theirs = copies(mine);
  txl::train::OnePassAdam ours(mine, torch::optim::AdamOptions(3e-3).weight_decay(0.1));
  torch::optim::AdamW other(theirs, torch::optim::AdamWOptions(3e-3).weight_decay(0.1));
  torch::manual_seed(4);
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < mine.size(); ++i) {
      auto g = torch::randn(mine[i].sizes(), torch::kDouble);
      mine[i].mutable_grad() = g.clone();
      theirs[i].mutable_grad() = g.clone();
    }
    ours.step();
    other.step();
  }
  EXPECT_FALSE(torch::allclose(mine[3].detach(), theirs[3].detach(), 1e-10, 1e-10));
}

// amsgrad and what the one pass does not take (half precision) are LibTorch's own step: equal.
TEST(OnePassAdam, FallsBackToLibTorchsStep) {
  for (bool amsgrad : {true, false}) {
    const auto dtype = amsgrad ? torch::kFloat : torch::kBFloat16;
    auto mine = random_parameters(dtype);
    auto theirs = copies(mine);
    const auto options = torch::optim::AdamOptions(3e-3).amsgrad(amsgrad);
    txl::train::OnePassAdam ours(mine, options);
    torch::optim::Adam library(theirs, options);
    for (int step = 0; step < 3; ++step) {
      for (size_t i = 0; i < mine.size(); ++i) {
        auto g = torch::randn(mine[i].sizes()).to(dtype);
        mine[i].mutable_grad() = g.clone();
        theirs[i].mutable_grad() = g.clone();
      }
      ours.step();
      library.step();
    }
    for (size_t i = 0; i < mine.size(); ++i) {
      EXPECT_TRUE(torch::equal(mine[i].detach(), theirs[i].detach())) << amsgrad;
    }
  }
}

// make_optimizer makes them.
TEST(OnePassAdam, MakeOptimizerMakesThem) {
  auto params = random_parameters(torch::kFloat);
  txl::config::TrainConfig t;
  t.optimizer = txl::config::Optimizer::kAdam;
  EXPECT_NE(dynamic_cast<txl::train::OnePassAdam*>(txl::train::make_optimizer(t, params).get()),
            nullptr);
  t.optimizer = txl::config::Optimizer::kAdamW;
  EXPECT_NE(dynamic_cast<txl::train::OnePassAdamW*>(txl::train::make_optimizer(t, params).get()),
            nullptr);
}

}  // namespace
