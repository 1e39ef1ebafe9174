#pragma once
// Attention masks, built once per segment and shared by every layer (docs/model.md sections 1, 4).
//
// Legend: B batch, Q query length, M memory length, K = M + Q keys. Query i sits at key index
// M + i. All masks are bool with true = visible (the key may be attended to).

#include <torch/torch.h>

#include <cstdint>

namespace txl::ops {

// Causal visibility [Q, K]: key j is visible to query i iff j <= M + i, and, when window > 0,
// also j > M + i - window (the query sees at most the `window` most recent keys, itself
// included). same_length (paper code) is window = mem_len: every query with enough history
// sees exactly mem_len keys.
torch::Tensor causal_mask(int64_t q_len, int64_t m_len, int64_t window = 0,
                          torch::Device device = torch::kCPU);

// The full visibility for one segment: causal_mask(q_len, m_len, window) AND key_mask (bool
// [B, K], true = real key; undefined = all real) AND extra (bool [Q, K] or [B, Q, K], true =
// allowed; undefined = no restriction). Returns bool [B, Q, K] (B = 1 when neither key_mask nor
// extra has a batch dimension).
torch::Tensor attention_mask(int64_t q_len, int64_t m_len, int64_t window,
                             const torch::Tensor& key_mask, const torch::Tensor& extra,
                             torch::Device device = torch::kCPU);

// The fill value for blocked scores of a given dtype: a large finite negative rather than -inf,
// so that a query with no visible key (a padding query) yields a uniform average instead of
// NaN, while a blocked key next to a visible one still gets a weight of exactly 0.
double blocked_score(torch::ScalarType dtype);

// Additive form of a mask: `blocked` (bool, true = hidden) -> 0 where visible and
// blocked_score(dtype) where hidden, same shape. Added to the scores it hides keys without a
// masked_fill, whose backward would cost one more pass over the scores in every layer.
torch::Tensor score_bias(const torch::Tensor& blocked, torch::ScalarType dtype);

// Distances M + i - j of query i to key j, [Q, K] in `dtype`: a key after its query (a blocked
// one) counts 0, and distances above clamp_len count clamp_len (-1 = no clamp).
torch::Tensor query_key_distances(int64_t q_len, int64_t k_len, int64_t clamp_len,
                                  torch::ScalarType dtype, torch::Device device);

}  // namespace txl::ops
