#include "txl/ops/linear_cross_entropy.h"

#include <algorithm>

#include "txl/util/autocast.h"

// Shapes: N rows, n rows of one block, d input width, V classes.

namespace txl::ops {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// About 1 MiB of fp32 statistics per block: large enough that the per-op overhead is small,
// small enough to stay in L2 between the passes over it.
constexpr std::int64_t kBlockElements = std::int64_t{1} << 18;

std::int64_t block_rows(std::int64_t chunk_rows, std::int64_t n_classes) {
  if (chunk_rows > 0) return chunk_rows;
  return std::max<std::int64_t>(1, kBlockElements / std::max<std::int64_t>(n_classes, 1));
}

// The dtype the log-sum-exp and softmax are computed in: fp32 for reduced-precision logits (a
// bf16 sum over thousands of classes rounds the small probabilities away), else their own.
torch::ScalarType stats_dtype(torch::ScalarType logits) {
  return logits == torch::kBFloat16 || logits == torch::kHalf ? torch::kFloat : logits;
}

class LinearCrossEntropy : public torch::autograd::Function<LinearCrossEntropy> {
 public:
  // hidden, weight, bias: already in the products' dtype. Autocast is switched off inside, so
  // the dtypes are the ones chosen here and the statistics are not cast back down.
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& bias, const torch::Tensor& target, std::int64_t chunk_rows) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const std::int64_t rows = hidden.size(0);
    const auto stats = stats_dtype(hidden.scalar_type());
    const torch::Tensor logits = torch::addmm(bias, hidden, weight.t());           // [N, V]
    torch::Tensor lse = torch::empty({rows}, hidden.options().dtype(stats));       // [N]
    const std::int64_t block = block_rows(chunk_rows, weight.size(0));
    for (std::int64_t r = 0; r < rows; r += block) {
      const std::int64_t n = std::min(block, rows - r);
      const torch::Tensor z = logits.narrow(0, r, n).to(stats);                    // [n, V]
      lse.narrow(0, r, n).copy_(torch::logsumexp(z, {1}));                         // [n]
    }
    const torch::Tensor picked = logits.gather(1, target.unsqueeze(1)).squeeze(1);  // [N]
    ctx->save_for_backward({hidden, weight, logits, lse, target});
    ctx->saved_data["chunk_rows"] = chunk_rows;
    return lse - picked.to(stats);  // [N]
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& hidden = saved[0];
    const torch::Tensor& weight = saved[1];
    const torch::Tensor& logits = saved[2];
    const torch::Tensor& lse = saved[3];
    const torch::Tensor& target = saved[4];
    const std::int64_t rows = logits.size(0), classes = logits.size(1);
    const auto stats = lse.scalar_type();
    const bool same_dtype = stats == logits.scalar_type();
    const torch::Tensor grad = grads[0].to(stats);  // [N]

    const std::int64_t block = block_rows(ctx->saved_data["chunk_rows"].toInt(), classes);
    torch::Tensor d_logits = torch::empty_like(logits, torch::MemoryFormat::Contiguous);  // [N, V]
    // Reduced-precision logits: each block is formed in one fp32 buffer, then written down once.
    torch::Tensor buffer;
    if (!same_dtype) buffer = torch::empty({std::min(block, rows), classes}, lse.options());  // [n, V]
    torch::Tensor d_bias = torch::zeros({classes}, lse.options());                          // [V]
    for (std::int64_t r = 0; r < rows; r += block) {
      const std::int64_t n = std::min(block, rows - r);
      torch::Tensor out = d_logits.narrow(0, r, n);                                 // [n, V]
      torch::Tensor p = same_dtype ? out : buffer.narrow(0, 0, n);                  // [n, V]
      // softmax - onehot, scaled by the upstream gradient of each row. (A plain copy then an
      // fp32 subtraction: a bf16 - fp32 subtraction into fp32 takes the slower mixed-dtype loop.)
      if (same_dtype) {
        torch::sub_out(p, logits.narrow(0, r, n), lse.narrow(0, r, n).unsqueeze(1));  // [n, V]
      } else {
        p.copy_(logits.narrow(0, r, n)).sub_(lse.narrow(0, r, n).unsqueeze(1));  // [n, V]
      }
      p.exp_();
      p.scatter_add_(1, target.narrow(0, r, n).unsqueeze(1), torch::full({n, 1}, -1.0, p.options()));
      p.mul_(grad.narrow(0, r, n).unsqueeze(1));
      d_bias.add_(p.sum(0));  // [V]
      if (!same_dtype) out.copy_(p);
    }

    torch::Tensor d_hidden, d_weight;
    if (ctx->needs_input_grad(0)) d_hidden = d_logits.mm(weight);      // [N, d]
    if (ctx->needs_input_grad(1)) d_weight = d_logits.t().mm(hidden);  // [V, d]
    return {d_hidden, d_weight, d_bias.to(logits.scalar_type()), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor linear_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                   const torch::Tensor& bias, const torch::Tensor& target,
                                   std::int64_t chunk_rows) {
  TORCH_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1),
              "linear_cross_entropy: hidden must be [N, d] and weight [V, d], got ", hidden.sizes(), " and ",
              weight.sizes());
  TORCH_CHECK(bias.defined() && bias.dim() == 1 && bias.size(0) == weight.size(0),
              "linear_cross_entropy: bias must be [V] = [", weight.size(0), "], got ",
              bias.defined() ? bias.sizes() : torch::IntArrayRef{});
  TORCH_CHECK(target.dim() == 1 && target.size(0) == hidden.size(0) && target.scalar_type() == torch::kLong,
              "linear_cross_entropy: target must be int64 [N] = [", hidden.size(0), "], got ", target.scalar_type(),
              " ", target.sizes());
  TORCH_CHECK(chunk_rows >= 0, "linear_cross_entropy: chunk_rows must be >= 0, got ", chunk_rows);
  // What torch::linear would run in: the autocast dtype for fp32/bf16/fp16 inputs while autocast
  // is on (fp64 is left alone, as autocast does), else the promoted input dtype.
  auto type = torch::promote_types(hidden.scalar_type(), weight.scalar_type());
  if (type != torch::kDouble && autocast_enabled(hidden.device())) type = autocast_dtype(hidden.device());
  // The casts stay outside the function, so autograd returns each gradient in its input's dtype.
  return LinearCrossEntropy::apply(hidden.to(type), weight.to(type), bias.to(type), target, chunk_rows);  // [N]
}

}  // namespace txl::ops
