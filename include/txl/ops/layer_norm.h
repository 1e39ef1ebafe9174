#pragma once
// The residual sum and layer norm of a post-norm decoder layer, LN(x + y), through the kernel
// that takes it: the step of a generated token does it twice a layer on a few rows, where
// LibTorch's add and layer_norm cost more in calls and allocations than in arithmetic.

#include <torch/torch.h>

namespace txl::ops {

// LN(x + y) over the last dimension, x and y [..., d], weight and bias [d] or undefined:
// kernels::add_layer_norm (one pass of txl's vector loops per row) without gradients on
// contiguous CPU float or double of one shape and dtype, else LibTorch's add and layer_norm
// (as torch::nn::LayerNorm, autograd).
torch::Tensor residual_layer_norm(const torch::Tensor& x, const torch::Tensor& y,
                                  const torch::Tensor& weight, const torch::Tensor& bias,
                                  double eps);

}  // namespace txl::ops
