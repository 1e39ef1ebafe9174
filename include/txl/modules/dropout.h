#pragma once
// Dropout as a module (residual, inner, attention and embedding dropout, docs/model.md section 5):
// torch::nn::Dropout's behaviour (active in train(), identity in eval()), with ops::dropout's
// fast mask generator. It has no parameters or buffers, so checkpoints do not see it.

#include <torch/torch.h>

namespace txl::modules {

class DropoutImpl : public torch::nn::Module {
 public:
  // p: probability of zeroing an element, in [0, 1).
  explicit DropoutImpl(double p = 0.5);
  // x any shape -> same shape; x itself in eval mode or for p = 0.
  torch::Tensor forward(const torch::Tensor& x);
  double p() const { return p_; }

 private:
  double p_;
};
TORCH_MODULE(Dropout);

}  // namespace txl::modules
