#include "txl/train/adam.h"

#include <tuple>

#include "txl/ops/adam.h"
#include "txl/util/compat.h"

namespace txl::train {

namespace {

// Whether the one pass takes every parameter with a gradient of every group, and no group asks
// for amsgrad (LibTorch's step does it).
template <typename Options>
bool one_pass_takes(torch::optim::Optimizer& optimizer) {
  for (auto& group : optimizer.param_groups()) {
    if (static_cast<const Options&>(group.options()).amsgrad()) return false;
    for (const auto& p : group.params()) {
      if (p.grad().defined() && !ops::adam_update_takes(p, p.grad())) return false;
    }
  }
  return true;
}

// torch::optim::Adam::step / AdamW::step with each parameter's update in one pass: the same
// state (created at a parameter's first gradient, its step counted before the update) and the
// same options.
template <typename Options, typename State>
void one_pass_step(torch::optim::Optimizer& optimizer, bool decoupled) {
  torch::NoGradGuard no_grad;
  auto& states = optimizer.state();
  for (auto& group : optimizer.param_groups()) {
    const auto& options = static_cast<const Options&>(group.options());
    ops::AdamScalars s;
    s.lr = options.lr();
    std::tie(s.beta1, s.beta2) = options.betas();
    s.eps = options.eps();
    s.weight_decay = options.weight_decay();
    s.decoupled = decoupled;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& entry = states[compat::optimizer_state_key(p)];
      if (!entry) {
        auto fresh = std::make_unique<State>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Contiguous));
        fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Contiguous));
        entry = std::move(fresh);
      }
      auto& state = static_cast<State&>(*entry);
      state.step(state.step() + 1);
      // A restored state may hold moments of another layout.
      if (!state.exp_avg().is_contiguous()) state.exp_avg(state.exp_avg().contiguous());
      if (!state.exp_avg_sq().is_contiguous()) state.exp_avg_sq(state.exp_avg_sq().contiguous());
      s.step = state.step();
      auto exp_avg = state.exp_avg();
      auto exp_avg_sq = state.exp_avg_sq();
      ops::adam_update(p, p.grad(), exp_avg, exp_avg_sq, s);
    }
  }
}

template <typename Options, typename State, typename Base>
torch::Tensor step_of(Base& optimizer, torch::optim::Optimizer::LossClosure closure,
                      bool decoupled) {
  torch::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  if (one_pass_takes<Options>(optimizer)) {
    one_pass_step<Options, State>(optimizer, decoupled);
  } else {
    optimizer.Base::step();
  }
  return loss;
}

}  // namespace

torch::Tensor OnePassAdam::step(LossClosure closure) {
  return step_of<torch::optim::AdamOptions, torch::optim::AdamParamState, torch::optim::Adam>(
      *this, std::move(closure), false);
}

torch::Tensor OnePassAdamW::step(LossClosure closure) {
  return step_of<torch::optim::AdamWOptions, torch::optim::AdamWParamState, torch::optim::AdamW>(
      *this, std::move(closure), true);
}

}  // namespace txl::train
