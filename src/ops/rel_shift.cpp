#include "txl/ops/rel_shift.h"

#include "txl/util/error.h"

namespace txl::ops {

namespace {

std::vector<int64_t> with_last_two(torch::IntArrayRef lead, int64_t a, int64_t b) {
  std::vector<int64_t> shape(lead.begin(), lead.end());
  shape.push_back(a);
  shape.push_back(b);
  return shape;
}

// Forward: one copy (the zero column). Backward: one copy too. The element (i, j) of the output
// sits at flat offset Q + i K + j of the padded buffer [Q, K+1], a one-to-one map onto its last
// Q K elements, so the gradient of the buffer is the output gradient behind Q zeros; dropping
// the zero column is a view. (Autograd's own backward of the view chain would zero-fill the
// whole buffer and copy into a slice of it.)
class RelShift : public torch::autograd::Function<RelShift> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x) {
    const int64_t q_len = x.size(-2), k_len = x.size(-1);
    ctx->saved_data["q_len"] = q_len;
    ctx->saved_data["k_len"] = k_len;
    auto lead = x.sizes().slice(0, x.dim() - 2);
    // cat, not constant_pad_nd: the latter fills the whole buffer before copying x into it.
    auto zero_column = torch::zeros(with_last_two(lead, q_len, 1), x.options());  // [..., Q, 1]
    auto padded = torch::cat({zero_column, x}, -1);                               // [..., Q, K+1]
    // Re-read the buffer as K+1 rows of Q and drop the first Q elements: (i, j) lands on
    // i (K+1) + 1 + (j + Q-1-i), i.e. x[i, j + Q-1-i] whenever j + Q-1-i <= K-1.
    return padded.view(with_last_two(lead, k_len + 1, q_len))
        .narrow(-2, 1, k_len)
        .view(with_last_two(lead, q_len, k_len));  // [..., Q, K]
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const int64_t q_len = ctx->saved_data["q_len"].toInt();
    const int64_t k_len = ctx->saved_data["k_len"].toInt();
    const auto& grad = grads[0];  // [..., Q, K]
    auto lead = grad.sizes().slice(0, grad.dim() - 2);
    std::vector<int64_t> flat_shape(lead.begin(), lead.end());
    flat_shape.push_back(q_len * k_len);
    std::vector<int64_t> zeros_shape(lead.begin(), lead.end());
    zeros_shape.push_back(q_len);
    auto buffer = torch::cat({torch::zeros(zeros_shape, grad.options()), grad.reshape(flat_shape)},
                             -1);  // [..., Q (K+1)]
    return {buffer.view(with_last_two(lead, q_len, k_len + 1)).narrow(-1, 1, k_len)};
  }
};

}  // namespace

torch::Tensor rel_shift(const torch::Tensor& x) {
  TXL_CHECK(x.dim() >= 2, "rel_shift: expected [..., Q, K], got ", x.dim(), "-D");
  TXL_CHECK(x.size(-1) >= x.size(-2),
            "rel_shift: needs K >= Q (keys are memory + segment), got Q = ", x.size(-2),
            ", K = ", x.size(-1));
  return RelShift::apply(x);
}

}  // namespace txl::ops
