#pragma once
// The last step of a generated token over the vocabulary, in one or two passes of txl's own
// vector loops over each row: log-softmax with the output bias added in place, and the argmax.
// LibTorch 1.13 takes 0.67 ms for the same work on a batch of 16 rows of 12,871 (addmm's copy
// of the bias into its result, log_softmax, argmax, one thread), about a sixth of a step.
//
// Legend: B rows, V vocabulary.

#include <torch/torch.h>

namespace txl::kernels {

// x [B, V] becomes log_softmax(x + bias) along V, in place, and is returned. bias [V] or
// undefined. x contiguous, CPU float or double (vector_loops_take); bias of x's dtype. fp32:
// within 2e-6 of the exact values (exp to 1e-7, sums in fp64; LibTorch's fp32 log_softmax sums
// in fp32); fp64: to 1e-12. -inf stays -inf; a NaN or +inf makes its row NaN. Throws txl::Error
// for a shape, dtype or device it does not take. Rows are split between threads by
// split_work.
torch::Tensor& log_softmax_rows_(torch::Tensor& x, const torch::Tensor& bias = {});

// The index of each row's largest entry, int64 [B], as torch::argmax(x, 1): the first of equal
// maxima, and the first NaN in a row that has one. x [B, V >= 1] contiguous, CPU float or double
// (vector_loops_take; ops::argmax_rows takes any x). Throws txl::Error for what it does not take.
torch::Tensor argmax_rows(const torch::Tensor& x);

}  // namespace txl::kernels
