#include "txl/ops/layer_norm.h"

#include "txl/kernels/layer_norm.h"
#include "txl/kernels/vector_loops.h"

namespace txl::ops {

torch::Tensor residual_layer_norm(const torch::Tensor& x, const torch::Tensor& y,
                                  const torch::Tensor& weight, const torch::Tensor& bias,
                                  double eps) {
  if (torch::GradMode::is_enabled() || !kernels::vector_loops_take(x) ||
      x.scalar_type() != y.scalar_type() || !x.is_contiguous() || !y.is_contiguous() ||
      x.sizes() != y.sizes() || (weight.defined() && weight.scalar_type() != x.scalar_type())) {
    return torch::layer_norm(x + y, {x.size(-1)}, weight, bias, eps);  // [..., d]
  }
  return kernels::add_layer_norm(x, y, weight, bias, eps);  // [..., d]
}

}  // namespace txl::ops
