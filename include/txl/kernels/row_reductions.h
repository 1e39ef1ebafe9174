#pragma once
// The last step of a generated token over the vocabulary, in one or two passes of txl's own
// vector loops over each row: log-softmax with the output bias added in place, and the argmax.
// LibTorch 1.13 takes 0.67 ms for the same work on a batch of 16 rows of 12,871 (addmm's copy
// of the bias into its result, log_softmax, argmax, one thread), about a sixth of a step.
//
// Legend: B rows, V vocabulary.

#include "txl/kernels/tensor.h"

namespace txl::kernels {

// x [B, V] becomes log_softmax(x + bias) along V, in place, and is returned. bias [V] or
// undefined. x contiguous, CPU float or double (vector_loops_take); bias of x's dtype. fp32:
// within 2e-6 of the exact values (exp to 1e-7, sums in fp64; LibTorch's fp32 log_softmax sums
// in fp32); fp64: to 1e-12. -inf stays -inf; a NaN or +inf makes its row NaN. Throws txl::Error
// for a shape, dtype or device it does not take. Rows are split between threads by
// split_work.
at::Tensor& log_softmax_rows_(at::Tensor& x, const at::Tensor& bias = {});

// The index of each row's largest entry, int64 [B], as torch::argmax(x, 1): the first of equal
// maxima, and the first NaN in a row that has one. x [B, V >= 1] contiguous, CPU float or double
// (vector_loops_take; ops::argmax_rows takes any x). Throws txl::Error for what it does not take.
at::Tensor argmax_rows(const at::Tensor& x);

// The output layer's softmax for training and evaluation, one pass of vector loops per step
// over each row of a block of logits, in place (LibTorch takes six operations: add the bias,
// amax, subtract, exp, sum, divide). x [n, V] (logits without their bias) contiguous, CPU float
// or double; bias [V] of x's dtype; lse [n] of x's dtype, contiguous. Writes lse[r] = log sum_j
// exp(x[r, j] + bias[j]) and, with `write`, x[r] = softmax(x[r] + bias) (else x holds x + bias).
// fp32: the vector exp (within 4e-7), sums in fp64 over blocks of 256. Rows are split between
// LibTorch's threads (at::parallel_for: a training job's run.threads).
void softmax_rows_(at::Tensor& x, const at::Tensor& bias, at::Tensor& lse, bool write);

// The gradient of sum_r grad[r] * nll[r] with respect to a block of logits, from their softmax:
// out[r, j] = probs[r, j] * grad[r] except out[r, target[r]] = d_target[r] (its softmax - 1 times
// grad[r], formed by the caller), and d_bias[j] += sum_r out[r, j]. probs and out [n, V]
// contiguous, CPU float or double, one dtype; grad, d_target [n] and d_bias [V] of that dtype,
// target int64 [n] (not checked per block: a target outside [0, V) writes no entry; the forward's
// gather has refused it). Columns are split between LibTorch's threads (each owns its d_bias
// entries).
void cross_entropy_grad_rows(const at::Tensor& probs, const at::Tensor& grad,
                             const at::Tensor& target, const at::Tensor& d_target, at::Tensor& out,
                             at::Tensor& d_bias);

}  // namespace txl::kernels
