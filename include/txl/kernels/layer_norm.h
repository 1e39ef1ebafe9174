#pragma once
// The residual sum and layer norm of a post-norm decoder layer, LN(x + y), in one pass of txl's
// own vector loops per row: the step of a generated token does it twice a layer on a few rows,
// where LibTorch's add and layer_norm cost more in calls and allocations than in arithmetic.
//
// Legend: N rows, d features.

#include "txl/kernels/tensor.h"

namespace txl::kernels {

// x, y [..., d] contiguous, one shape and dtype (CPU float or double: vector_loops_take);
// weight, bias [d] of that dtype, or undefined (no affine). Returns
//   (s - mean(s)) / sqrt(var(s) + eps) * weight + bias,  s = x + y,
// mean and (biased) variance over the last dimension, as torch::layer_norm(x + y, {d}, weight,
// bias, eps): fp64 to 1e-12, fp32 to 1e-5 (moments summed in double). Throws txl::Error for
// shapes, dtypes or a device it does not take.
at::Tensor add_layer_norm(const at::Tensor& x, const at::Tensor& y, const at::Tensor& weight,
                          const at::Tensor& bias, double eps);

}  // namespace txl::kernels
