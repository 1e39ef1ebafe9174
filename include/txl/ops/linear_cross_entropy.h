#pragma once
// The output layer's cross-entropy as one fused, differentiable call (docs/model.md section 5):
//
//     nll[i] = logsumexp_v(z[i, v]) - z[i, target[i]],     z = h W^T + b
//
// the same numbers as log_softmax(linear(h, W, b)) followed by nll_loss(reduction none), without
// the [N, V] log-probabilities and their [N, V] gradients. Forward forms the logits, then, a
// block of rows at a time in the statistics dtype (the block stays in cache), the log-sum-exp
// [N] and the softmax, written over the logits in the product's dtype (bf16 under autocast): the
// softmax is all backward needs, so it does not recompute it. Backward forms
//     d_z = (softmax(z) - onehot(target)) * d_nll
// a block at a time, the target entries from the log-sum-exp in the statistics dtype (a bf16
// softmax near 1 minus 1 would lose the difference), writes it once in the product's dtype, and
// finishes with d_h = d_z W, d_W = d_z^T h, d_b = sum of d_z over rows. On the CPU in fp32 or
// fp64 a block's softmax and its d_z (with d_b's sum) are one kernel call each
// (kernels::softmax_rows_, kernels::cross_entropy_grad_rows: a pass per step over the block,
// where LibTorch's operations take six); elsewhere LibTorch's operations do the same steps.
//
// Precision, as the unfused path under autocast where the CPU has AVX-512 (and on CUDA): the
// matrix products run in the autocast dtype
// when autocast is on for h's device (fp32 inputs are cast, like torch::linear would be), else in
// the promoted dtype of h and W; but bf16 / fp16 products on a CPU without AVX-512 run in fp32
// (linear_cross_entropy_dtype). The statistics (max, log-sum-exp, softmax) are fp32 when the
// products are bf16/fp16 and the products' own dtype otherwise (fp64 stays fp64 for gradient
// checks); nll is returned in that dtype. The softmax kept for backward is in the products'
// dtype: right for bf16; under fp16 autocast (not a run.precision txl offers) probabilities below
// fp16's normal range (6e-5) would keep fewer bits.
//
// Targets are not masked here: every row is scored, and a row whose nll the caller masks out
// gets a zero upstream gradient and so contributes nothing (the trainer's masked_fill does that).
//
// Shapes: N rows, d input width, V classes.

#include <torch/torch.h>

#include <cstdint>

namespace txl::ops {

// hidden [N, d], weight [V, d], bias [V], target int64 [N] with values in [0, V) -> nll [N].
// chunk_rows: rows per block of the softmax statistics and its gradient; 0 picks about 1 MiB of
// fp32 per block. Differentiable in hidden, weight and bias.
torch::Tensor linear_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                   const torch::Tensor& bias, const torch::Tensor& target,
                                   std::int64_t chunk_rows = 0);

// The dtype linear_cross_entropy multiplies in for these inputs, in the current autocast state:
// what torch::linear would run in, except fp32 for bf16 / fp16 on a CPU without AVX-512. There
// LibTorch's reduced-precision products do not go through oneDNN and accumulate in the reduced
// type: on a Zen 3 (AVX2) a bf16 [8000 x 1024] x [1024 x 256] product was 2% off over 64 rows
// and took 0.88 s, against 0.066 s cast to fp32 and back.
torch::ScalarType linear_cross_entropy_dtype(const torch::Tensor& hidden,
                                             const torch::Tensor& weight);

}  // namespace txl::ops
