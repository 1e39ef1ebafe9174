#pragma once
// Sinusoid encodings (Vaswani et al. 2017, section 3.5) of positions or relative distances, and
// the relative distances of a segment's keys (Transformer-XL, section 3.3).
//
// Legend: Q query length, M memory length, K = M + Q keys, d model width.

#include <torch/torch.h>

#include <cstdint>

namespace txl::ops {

// Encoding of each value p of `positions` (float or double [L]): [L, dim] with
// row = [sin(p w_0) ... sin(p w_{dim/2-1}), cos(p w_0) ... cos(p w_{dim/2-1})],
// w_k = 10000^(-2k/dim). The halves are concatenated rather than interleaved (as in the paper
// code); a model that projects the encoding is indifferent to the order. `dim` must be even.
torch::Tensor sinusoid_encoding(const torch::Tensor& positions, int64_t dim);

// Distances between the last query and each key, in key order: int64 [n_keys] holding
// n_keys-1, n_keys-2, ..., 0, each clamped to `clamp_len` when clamp_len >= 0 (-1 = no clamp).
// Row i of the relative shift (rel_shift.h) then lines up query i with distance M + i - j.
torch::Tensor relative_distances(int64_t n_keys, int64_t clamp_len,
                                 torch::Device device = torch::kCPU);

}  // namespace txl::ops
