#pragma once
// Attention with linear biases (ALiBi; Press et al. 2022, section 3): no position encodings; each
// head h adds -m_h times the query-key distance to its scores, with head slopes m_h a geometric
// sequence.
//
// Legend: H heads, Q queries, K keys (the queries are the last Q of them), M = K - Q.

#include <torch/torch.h>

#include <cstdint>

namespace txl::ops {

// The slopes [H] of the paper: 2^(-8 h / H) for h = 1 .. H when H is a power of two; otherwise
// those of the largest power of two P below H, followed by every other slope of 2 P heads
// (footnote of section 3, as the authors' code does).
torch::Tensor alibi_slopes(int64_t n_head, torch::ScalarType dtype, torch::Device device);

}  // namespace txl::ops
