#pragma once
// Position-wise feed-forward block: W_2 dropout(relu(W_1 x + b_1)) + b_2 (docs/model.md section 5).
// The residual dropout and the LayerNorm belong to the decoder layer. The decoding step is the
// same formula (one function, `apply`) through weights prepared for a few rows at a time.

#include <torch/torch.h>

#include <cstdint>

#include "txl/modules/dropout.h"
#include "txl/modules/param_init.h"
#include "txl/ops/projection.h"

namespace txl::modules {

struct FeedForwardOptions {
  int64_t d_model = 256;  // d
  int64_t d_inner = 1024;
  double dropout = 0.0;  // on the inner activation
  InitOptions init;
};

// W_1, W_2 prepared for decoding (ops::Projection::packed_for_decoding): copies, shared by
// every decoder of the model; prepare again after the weights change.
struct FeedForwardStep {
  ops::Projection fc1, fc2;
};

class FeedForwardImpl : public torch::nn::Module {
 public:
  explicit FeedForwardImpl(const FeedForwardOptions& options);
  torch::Tensor forward(const torch::Tensor& x);  // [..., d] -> [..., d]
  void reset_parameters(const InitOptions& init);

  FeedForwardStep prepare_step() const;
  // The decoding step of the tokens x [..., d] -> [..., d]: the forward's formula (no dropout:
  // decoding is in evaluation mode).
  torch::Tensor step(const FeedForwardStep& weights, const torch::Tensor& x);

  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  Dropout drop{nullptr};

 private:
  // W_2 dropout(relu(W_1 x + b_1)) + b_2, the products through `first` and `second`.
  torch::Tensor apply(const torch::Tensor& x, const ops::Projection& first,
                      const ops::Projection& second);
};
TORCH_MODULE(FeedForward);

}  // namespace txl::modules
