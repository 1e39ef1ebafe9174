#pragma once
// Parameter initialisation as in the Transformer-XL paper code: weights ~ N(0, std) or
// U(-std, std), biases 0, LayerNorm weights ~ N(1, std) (or exactly 1), u / v biases and
// learned position tables like weights.

#include <torch/torch.h>

#include <string>

namespace txl::modules {

struct InitOptions {
  std::string init = "normal";       // normal | uniform
  double std = 0.02;                 // normal: standard deviation; uniform: half-range
  std::string norm_init = "normal";  // LayerNorm weight: normal = N(1, std) | ones
};

// Fills `weight` in place (no autograd) per options.init; throws txl::Error on an unknown init.
void init_weight(torch::Tensor weight, const InitOptions& options);

// LayerNorm: weight per options.norm_init, bias 0.
void init_layer_norm(torch::nn::LayerNorm& norm, const InitOptions& options);

// Linear: weight per options.init, bias (if any) 0.
void init_linear(torch::nn::Linear& linear, const InitOptions& options);

}  // namespace txl::modules
