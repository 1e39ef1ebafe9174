#pragma once
// Rotary position embedding (RoPE; Su et al. 2021, RoFormer, section 3.4): queries and keys are
// turned by angles proportional to their positions, so that a query-key product depends on the
// two positions only through their distance. Pairs of dimensions are interleaved: dimensions
// 2k and 2k+1 of a head turn by the angle p theta^(-2k/D) at position p, theta = 10000 (the
// layout of PyPI's rotary-embedding-torch).
//
// Legend: n positions, L rows of a call, D head size (even).

#include <torch/torch.h>

#include <cstdint>

namespace txl::ops {

// cos and sin of positions 0 .. n-1: [2, n, D] (each angle twice, for the two dimensions of its
// pair), computed in double and returned in `dtype`.
torch::Tensor rotary_table(int64_t n, int64_t dim, torch::ScalarType dtype, torch::Device device);

// x [..., L, D] turned to positions first .. first + L - 1: x cos + turn(x) sin, where turn
// maps each pair (a, b) to (-b, a). `table` from rotary_table with at least first + L rows.
torch::Tensor rotate(const torch::Tensor& x, const torch::Tensor& table, int64_t first);

}  // namespace txl::ops
