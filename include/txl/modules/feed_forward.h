#pragma once
// Position-wise feed-forward block: W_2 dropout(relu(W_1 x + b_1)) + b_2 (MODEL.md section 5).
// The residual dropout and the LayerNorm belong to the decoder layer.

#include <torch/torch.h>

#include <cstdint>

#include "txl/modules/dropout.h"
#include "txl/modules/param_init.h"

namespace txl::modules {

struct FeedForwardOptions {
  int64_t d_model = 256;  // d
  int64_t d_inner = 1024;
  double dropout = 0.0;  // on the inner activation
  InitOptions init;
};

class FeedForwardImpl : public torch::nn::Module {
 public:
  explicit FeedForwardImpl(const FeedForwardOptions& options);
  torch::Tensor forward(const torch::Tensor& x);  // [..., d] -> [..., d]
  void reset_parameters(const InitOptions& init);

  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  Dropout drop{nullptr};
};
TORCH_MODULE(FeedForward);

}  // namespace txl::modules
