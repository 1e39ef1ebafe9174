#include "txl/ops/matmul.h"

#include "txl/kernels/batched_matmul.h"
#include "txl/kernels/vector_loops.h"
#include "txl/util/autocast.h"
#include "txl/util/error.h"

namespace txl::ops {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// [..., M, K] -> [S, M, K], a view where the leading dimensions allow one (reshape).
torch::Tensor as_batch(const torch::Tensor& x) { return x.reshape({-1, x.size(-2), x.size(-1)}); }

// Both products of the backward go through the kernel too: grad_a = grad b^T, grad_b = a^T grad,
// the transposes read in place.
class BatchedMatmul : public torch::autograd::Function<BatchedMatmul> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& a,
                               const torch::Tensor& b) {
    ctx->save_for_backward({a, b});
    auto shape = a.sizes().vec();
    shape.back() = b.size(-1);
    auto c = torch::empty(shape, a.options());  // [..., M, N], returned whole (not a view)
    auto rows = c.view({-1, a.size(-2), b.size(-1)});
    kernels::batched_matmul_into(as_batch(a), as_batch(b), rows);
    return c;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto a = as_batch(saved[0]), b = as_batch(saved[1]);  // [S, M, K], [S, K, N]
    const auto grad = as_batch(grads[0]);                       // [S, M, N]
    // A backward with a graph (create_graph) is LibTorch's, whose products differentiate again.
    const auto product = [](const torch::Tensor& x, const torch::Tensor& y) {
      return torch::GradMode::is_enabled() ? torch::matmul(x, y) : kernels::batched_matmul(x, y);
    };
    torch::Tensor grad_a, grad_b;
    if (ctx->needs_input_grad(0)) {
      grad_a = product(grad, b.transpose(1, 2)).view(saved[0].sizes());
    }
    if (ctx->needs_input_grad(1)) {
      grad_b = product(a.transpose(1, 2), grad).view(saved[1].sizes());
    }
    return {grad_a, grad_b};
  }
};

}  // namespace

torch::Tensor batched_matmul(const torch::Tensor& a, const torch::Tensor& b) {
  TXL_CHECK(a.defined() && b.defined() && a.dim() >= 3 && a.dim() == b.dim() &&
                a.sizes().slice(0, a.dim() - 2) == b.sizes().slice(0, b.dim() - 2) &&
                a.size(-1) == b.size(-2),
            "batched_matmul: a [..., M, K] and b [..., K, N] with the same leading dimensions, "
            "got ",
            a.defined() ? a.sizes() : torch::IntArrayRef{}, " and ",
            b.defined() ? b.sizes() : torch::IntArrayRef{});
  // Under autocast the products are LibTorch's, in its lower precision.
  if (!kernels::vector_loops_take(a) || !kernels::vector_loops_take(b) ||
      a.scalar_type() != b.scalar_type() || autocast_enabled(a.device())) {
    return torch::matmul(a, b);
  }
  return BatchedMatmul::apply(a, b);  // [..., M, N]
}

}  // namespace txl::ops
