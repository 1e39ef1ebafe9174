#pragma once
// The relative shift of Transformer-XL (appendix B).
//
// The position term (q_i + v)^T W_R R[r] is computed for every query i and every distance
// column p of relative_distances(K) (distance K-1-p) with one matrix product, giving x [.., Q, K]
// indexed by (query, distance column). Query i (absolute key index M + i, K = M + Q) needs at key
// j the distance M + i - j, i.e. column K-1-(M+i-j) = j + Q-1-i: row i is shifted left by
// Q-1-i. rel_shift realigns all rows with one copy (a zero column is put in front of every row
// and the buffer, less its first Q elements, is re-read as rows of K), never a loop over
// positions; its backward is one copy as well.

#include <torch/torch.h>

namespace txl::ops {

// x [..., Q, K] with K >= Q -> [..., Q, K], out[..., i, j] = x[..., i, j + Q - 1 - i] for every
// key j <= i + K - Q (the causal part). Entries with j > i + K - Q (future keys) hold unrelated
// values and must be masked by the caller. One copy; differentiable.
torch::Tensor rel_shift(const torch::Tensor& x);

}  // namespace txl::ops
