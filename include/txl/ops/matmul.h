#pragma once
// The attention's batched matrix products, q k^T and weights v, per head and row.

#include <torch/torch.h>

namespace txl::ops {

// a [..., M, K] times b [..., K, N] with the same leading dimensions -> [..., M, N], as
// torch::matmul. On the CPU in float or double outside autocast, the products and their
// gradients (grad b^T, a^T grad) are kernels::batched_matmul's, any strides (a transposed view is
// read in place); elsewhere torch::matmul. Differentiable either way, twice too (a backward with
// a graph is torch::matmul's).
torch::Tensor batched_matmul(const torch::Tensor& a, const torch::Tensor& b);

}  // namespace txl::ops
