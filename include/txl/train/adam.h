#pragma once
// The Adam and AdamW that train::make_optimizer makes: LibTorch's torch::optim::Adam and AdamW
// (their options, state and checkpoints unchanged) whose step updates each parameter in one pass
// (ops::adam_update) when every parameter is on the CPU in float or double, and is LibTorch's
// own step otherwise (a GPU, half precision, amsgrad). The one pass computes LibTorch's terms in
// LibTorch's order; it rounds differently only where LibTorch's vectorized add fuses a product
// into the sum (within fp32's rounding; tests/train/adam_test.cpp).

#include <torch/torch.h>

namespace txl::train {

class OnePassAdam : public torch::optim::Adam {
 public:
  using torch::optim::Adam::Adam;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

class OnePassAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace txl::train
