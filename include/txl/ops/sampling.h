#pragma once
// Choosing the next token of a generation from the model's log-probabilities: the top-k and
// top-p (nucleus, Holtzman et al. 2020) filters and one draw per row by inverse CDF.
//
// Legend: B rows, V vocabulary. Scores are log-probabilities up to a constant per row (e.g.
// divided by a temperature); a filtered-out entry is -inf and is never drawn.

#include <torch/torch.h>

#include <cstdint>

namespace txl::ops {

// scores [B, V] with every entry below each row's k-th largest set to -inf (ties with the k-th
// are kept). k <= 0 or k >= V: unchanged.
torch::Tensor top_k_filter(const torch::Tensor& scores, int64_t k);

// scores [B, V] with each row kept to its smallest set of most probable entries whose
// probability mass (softmax of the row) is >= p, the others -inf: entries are taken in
// decreasing order while the mass taken before them is below p (less 1e-12 for rounding: the
// mass comes back from log-probabilities). p >= 1: unchanged. Throws
// txl::Error for p <= 0.
torch::Tensor top_p_filter(const torch::Tensor& scores, double p);

// The index of each row's largest entry, int64 [B], as torch::argmax(x, 1): the first of equal
// maxima, and the first NaN in a row that has one. Any x [B, V] with V >= 1: txl's row loop
// (kernels::argmax_rows) for a contiguous CPU float or double, LibTorch's argmax elsewhere.
torch::Tensor argmax_rows(const torch::Tensor& x);

// One index per row drawn from softmax(scores) [B, V]: the first index whose cumulative
// probability exceeds uniforms[b] x the row's total (uniforms: double [B] in [0, 1)). Never an
// entry of probability 0. Returns int64 [B].
torch::Tensor draw(const torch::Tensor& scores, const torch::Tensor& uniforms);

}  // namespace txl::ops
