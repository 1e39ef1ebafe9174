#include "txl/ops/linear_cross_entropy.h"

#include <algorithm>

#include "txl/kernels/row_reductions.h"
#include "txl/kernels/vector_loops.h"
#include "txl/util/autocast.h"
#include "txl/util/cpu.h"

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

// The forward pass: the log-sum-exp and the picked logit of every row, and, with keep_softmax,
// the softmax written over the logits in the products' dtype (backward's only [N, V] input).
// Inputs already in the products' dtype; autocast must be off.
struct Forward {
  torch::Tensor softmax;  // [N, V], products' dtype (undefined without keep_softmax)
  torch::Tensor lse;      // [N], statistics dtype
  torch::Tensor picked;   // [N], statistics dtype: z[i, target[i]]
};

Forward forward_pass(const torch::Tensor& hidden, const torch::Tensor& weight,
                     const torch::Tensor& bias, const torch::Tensor& target,
                     std::int64_t chunk_rows, bool keep_softmax) {
  const std::int64_t rows = hidden.size(0), classes = weight.size(0);
  const auto stats = stats_dtype(hidden.scalar_type());
  const bool same_dtype = stats == hidden.scalar_type();
  Forward f;
  // Statistics in the products' dtype: the bias is added block by block, in cache (addmm would
  // first write it into all N rows of the output, a pass over [N, V]: 25 ms of the bench
  // model's 280 ms evaluation segment). Reduced precision: addmm, so that the logits are
  // rounded once with their bias, as the unfused autocast path rounds them.
  torch::Tensor logits = same_dtype ? torch::mm(hidden, weight.t())
                                    : torch::addmm(bias, hidden, weight.t());  // [N, V]
  f.picked = logits.gather(1, target.unsqueeze(1)).squeeze(1).to(stats);       // [N]
  if (same_dtype) f.picked.add_(bias.index_select(0, target));
  f.lse = torch::empty({rows}, hidden.options().dtype(stats));  // [N]
  const std::int64_t block = block_rows(chunk_rows, classes);
  if (same_dtype && kernels::vector_loops_take(logits)) {
    // CPU float or double: txl's row kernel, one pass per step over each row of a block.
    const torch::Tensor b = bias.contiguous();  // [V]
    for (std::int64_t r = 0; r < rows; r += block) {
      const std::int64_t n = std::min(block, rows - r);
      torch::Tensor out = logits.narrow(0, r, n);  // [n, V]
      torch::Tensor lse = f.lse.narrow(0, r, n);   // [n]
      kernels::softmax_rows_(out, b, lse, keep_softmax);
    }
    if (keep_softmax) f.softmax = logits;
    return f;
  }
  // Reduced precision: each block is copied into one fp32 buffer (it stays in cache).
  torch::Tensor buffer;
  if (!same_dtype)
    buffer = torch::empty({std::min(block, rows), classes}, f.lse.options());  // [n, V]
  for (std::int64_t r = 0; r < rows; r += block) {
    const std::int64_t n = std::min(block, rows - r);
    torch::Tensor out = logits.narrow(0, r, n);                                         // [n, V]
    torch::Tensor z = same_dtype ? out.add_(bias) : buffer.narrow(0, 0, n).copy_(out);  // [n, V]
    const torch::Tensor max = z.amax(1, /*keepdim=*/true);                              // [n, 1]
    z.sub_(max).exp_();                                                                 // [n, V]
    const torch::Tensor sum = z.sum(1, /*keepdim=*/true);                               // [n, 1]
    f.lse.narrow(0, r, n).copy_(sum.log().add_(max).squeeze(1));                        // [n]
    if (keep_softmax) {
      z.div_(sum);
      if (!same_dtype) out.copy_(z);  // rounded once into the products' dtype
    }
  }
  if (keep_softmax) f.softmax = logits;
  return f;
}

class LinearCrossEntropy : public torch::autograd::Function<LinearCrossEntropy> {
 public:
  // hidden, weight, bias: already in the products' dtype. Autocast is switched off inside, so
  // the dtypes are the ones chosen here and the statistics are not cast back down.
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& hidden,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               const torch::Tensor& target, std::int64_t chunk_rows) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    Forward f = forward_pass(hidden, weight, bias, target, chunk_rows, /*keep_softmax=*/true);
    ctx->save_for_backward({hidden, weight, f.softmax, f.lse, f.picked, target});
    ctx->saved_data["chunk_rows"] = chunk_rows;
    return f.lse - f.picked;  // [N]
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& hidden = saved[0];
    const torch::Tensor& weight = saved[1];
    const torch::Tensor& probs = saved[2];
    const torch::Tensor& lse = saved[3];
    const torch::Tensor& picked = saved[4];
    const torch::Tensor& target = saved[5];
    const torch::Tensor grad = grads[0].to(lse.scalar_type());  // [N]

    // d_z = softmax * d_nll a block at a time in the statistics dtype (a bf16 block is copied
    // into one fp32 buffer, which stays in cache, and written down once). The target entries,
    // softmax - 1, are formed from the log-sum-exp: rounding a softmax near 1 to bf16 before
    // subtracting 1 would lose the small difference.
    const auto stats = lse.scalar_type();
    const bool same_dtype = stats == probs.scalar_type();
    const std::int64_t rows = probs.size(0), classes = probs.size(1);
    const torch::Tensor d_target = (picked - lse).exp_().sub_(1).mul_(grad).unsqueeze(1);  // [N, 1]
    const std::int64_t block = block_rows(ctx->saved_data["chunk_rows"].toInt(), classes);
    torch::Tensor d_logits = torch::empty_like(probs, torch::MemoryFormat::Contiguous);  // [N, V]
    torch::Tensor d_bias = torch::zeros({classes}, lse.options());                       // [V]
    if (same_dtype && kernels::vector_loops_take(probs) && probs.is_contiguous()) {
      // CPU float or double: txl's kernel writes d_logits and sums d_bias in one pass a block.
      const torch::Tensor g = grad.contiguous(), t = target.contiguous();
      const torch::Tensor d_t = d_target.squeeze(1).contiguous();  // [N]
      for (std::int64_t r = 0; r < rows; r += block) {
        const std::int64_t n = std::min(block, rows - r);
        torch::Tensor out = d_logits.narrow(0, r, n);  // [n, V]
        kernels::cross_entropy_grad_rows(probs.narrow(0, r, n), g.narrow(0, r, n),
                                         t.narrow(0, r, n), d_t.narrow(0, r, n), out, d_bias);
      }
    } else {
      torch::Tensor buffer;
      if (!same_dtype)
        buffer = torch::empty({std::min(block, rows), classes}, lse.options());  // [n, V]
      for (std::int64_t r = 0; r < rows; r += block) {
        const std::int64_t n = std::min(block, rows - r);
        torch::Tensor out = d_logits.narrow(0, r, n);  // [n, V]
        torch::Tensor p =
            same_dtype ? out : buffer.narrow(0, 0, n).copy_(probs.narrow(0, r, n));  // [n, V]
        torch::mul_out(p, same_dtype ? probs.narrow(0, r, n) : p,
                       grad.narrow(0, r, n).unsqueeze(1));
        p.scatter_(1, target.narrow(0, r, n).unsqueeze(1), d_target.narrow(0, r, n));
        d_bias.add_(p.sum(0));  // [V]
        if (!same_dtype) out.copy_(p);
      }
    }

    torch::Tensor d_hidden, d_weight;
    if (ctx->needs_input_grad(0)) d_hidden = d_logits.mm(weight);      // [N, d]
    if (ctx->needs_input_grad(1)) d_weight = d_logits.t().mm(hidden);  // [V, d]
    return {d_hidden, d_weight, d_bias.to(probs.scalar_type()), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::ScalarType linear_cross_entropy_dtype(const torch::Tensor& hidden,
                                             const torch::Tensor& weight) {
  // What torch::linear would run in: the autocast dtype for fp32/bf16/fp16 inputs while autocast
  // is on (fp64 is left alone, as autocast does), else the promoted input dtype.
  auto type = torch::promote_types(hidden.scalar_type(), weight.scalar_type());
  if (type != torch::kDouble && autocast_enabled(hidden.device()))
    type = autocast_dtype(hidden.device());
  // LibTorch multiplies bf16 and fp16 on the CPU with oneDNN (fp32 sums) only where the CPU has
  // AVX-512; elsewhere in fp32, with the gradients still in each input's dtype.
  if ((type == torch::kBFloat16 || type == torch::kHalf) && hidden.is_cpu() &&
      !util::cpu_features().avx512)
    type = torch::kFloat;
  return type;
}

torch::Tensor linear_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                   const torch::Tensor& bias, const torch::Tensor& target,
                                   std::int64_t chunk_rows) {
  TORCH_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1),
              "linear_cross_entropy: hidden must be [N, d] and weight [V, d], got ", hidden.sizes(),
              " and ", weight.sizes());
  TORCH_CHECK(bias.defined() && bias.dim() == 1 && bias.size(0) == weight.size(0),
              "linear_cross_entropy: bias must be [V] = [", weight.size(0), "], got ",
              bias.defined() ? bias.sizes() : torch::IntArrayRef{});
  TORCH_CHECK(
      target.dim() == 1 && target.size(0) == hidden.size(0) && target.scalar_type() == torch::kLong,
      "linear_cross_entropy: target must be int64 [N] = [", hidden.size(0), "], got ",
      target.scalar_type(), " ", target.sizes());
  TORCH_CHECK(chunk_rows >= 0, "linear_cross_entropy: chunk_rows must be >= 0, got ", chunk_rows);
  const auto type = linear_cross_entropy_dtype(hidden, weight);
  // No gradient to form (evaluation): the statistics alone, no softmax written, nothing saved.
  const bool needs_grad =
      torch::GradMode::is_enabled() &&
      (hidden.requires_grad() || weight.requires_grad() || bias.requires_grad());
  if (!needs_grad) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    Forward f = forward_pass(hidden.to(type), weight.to(type), bias.to(type), target, chunk_rows,
                             /*keep_softmax=*/false);
    return f.lse - f.picked;  // [N]
  }
  // The casts stay outside the function, so autograd returns each gradient in its input's dtype.
  return LinearCrossEntropy::apply(hidden.to(type), weight.to(type), bias.to(type), target,
                                   chunk_rows);  // [N]
}

}  // namespace txl::ops
