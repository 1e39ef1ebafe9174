#pragma once
// The attention step of one new position per row over a buffer of cached keys and values
// (incremental decoding), through the kernel that takes it: kernels::attend_cached for CPU
// float or double (its AVX-512 kernel where the CPU's level has AVX-512 and the head size is
// 16 N, N <= 8; its portable loops otherwise). Elsewhere (a GPU, half precision)
// attend_cached_takes is false, and the attention module computes the same step with tensor
// operations (modules::MultiHeadAttentionImpl::step).
//
// For row b, head h, with K keys in use (the new position's own key last, at slot K-1):
//   s_k = (q + u) . key_k + (q + v) . R[K-1-k]     k in [first_b, K)
//   out = sum_k softmax(s)_k value_k
//
// Legend: B rows, H heads, D head size, C buffer capacity (slots), K keys in use.

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "txl/kernels/cached_attention.h"

namespace txl::ops {

// The buffer [2, H, B, C, D], the encodings by distance [H, C, D] and the biases u, v [H, D]
// (kernels/cached_attention.h).
using CachedKeys = kernels::CachedKeys;

// Whether attend_cached takes buffers like `like`: CPU float or double.
bool attend_cached_takes(const torch::Tensor& like);

// qkv [B, 3, H, D], contiguous: the new position's query (already scaled by 1/sqrt(D)), key and
// value. Writes the key and value into slot k_len - 1 of every row of `keys.buffer`, and returns
// the attention output [B, H D] (heads in order). first[b]: the first slot row b sees
// (0 <= first[b] < k_len). Throws txl::Error for shapes, dtypes or a device it does not take.
torch::Tensor attend_cached(const torch::Tensor& qkv, const CachedKeys& keys, int64_t k_len,
                            const std::vector<int64_t>& first);

}  // namespace txl::ops
