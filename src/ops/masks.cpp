#include "txl/ops/masks.h"

#include "txl/util/error.h"

namespace txl::ops {

torch::Tensor causal_mask(int64_t q_len, int64_t m_len, int64_t window, torch::Device device) {
  TXL_CHECK(q_len >= 0 && m_len >= 0, "causal_mask: lengths must be >= 0, got Q = ", q_len,
            ", M = ", m_len);
  TXL_CHECK(window >= 0, "causal_mask: window must be >= 0 (0 = unlimited), got ", window);
  auto opts = torch::dtype(torch::kLong).device(device);
  auto query_pos = torch::arange(m_len, m_len + q_len, opts).unsqueeze(1);  // [Q, 1]
  auto key_pos = torch::arange(0, m_len + q_len, opts).unsqueeze(0);        // [1, K]
  auto visible = key_pos <= query_pos;                                      // [Q, K]
  if (window > 0) visible.logical_and_(key_pos > query_pos - window);
  return visible;
}

torch::Tensor attention_mask(int64_t q_len, int64_t m_len, int64_t window,
                             const torch::Tensor& key_mask, const torch::Tensor& extra,
                             torch::Device device) {
  const int64_t k_len = m_len + q_len;
  auto visible = causal_mask(q_len, m_len, window, device).unsqueeze(0);  // [1, Q, K]
  if (key_mask.defined()) {
    TXL_CHECK(
        key_mask.dim() == 2 && key_mask.size(1) == k_len && key_mask.scalar_type() == torch::kBool,
        "attention_mask: key_mask must be bool [B, K = ", k_len, "], got ", key_mask.sizes(), " ",
        key_mask.scalar_type());
    visible = visible.logical_and(key_mask.unsqueeze(1));  // [B, Q, K]
  }
  if (extra.defined()) {
    TXL_CHECK((extra.dim() == 2 || extra.dim() == 3) && extra.size(-2) == q_len &&
                  extra.size(-1) == k_len && extra.scalar_type() == torch::kBool,
              "attention_mask: extra mask must be bool [Q, K] or [B, Q, K] with Q = ", q_len,
              ", K = ", k_len, ", got ", extra.sizes(), " ", extra.scalar_type());
    visible = visible.logical_and(extra.dim() == 2 ? extra.unsqueeze(0) : extra);  // [B, Q, K]
  }
  return visible;
}

double blocked_score(torch::ScalarType dtype) {
  // -1e30 is finite in float, double and bfloat16; half tops out at 65504.
  return dtype == torch::kHalf ? -6.0e4 : -1.0e30;
}

torch::Tensor score_bias(const torch::Tensor& blocked, torch::ScalarType dtype) {
  TXL_CHECK(blocked.scalar_type() == torch::kBool, "score_bias: mask must be bool, got ",
            blocked.scalar_type());
  return torch::zeros(blocked.sizes(), blocked.options().dtype(dtype))
      .masked_fill_(blocked, blocked_score(dtype));
}

torch::Tensor query_key_distances(int64_t q_len, int64_t k_len, int64_t clamp_len,
                                  torch::ScalarType dtype, torch::Device device) {
  TXL_CHECK(q_len >= 0 && k_len >= q_len && clamp_len >= -1, "query_key_distances: needs ",
            "0 <= Q <= K and clamp_len >= -1, got Q = ", q_len, ", K = ", k_len,
            ", clamp_len = ", clamp_len);
  const auto opts = torch::dtype(torch::kLong).device(device);
  auto dist = (torch::arange(k_len - q_len, k_len, opts).unsqueeze(1) -
               torch::arange(k_len, opts).unsqueeze(0))
                  .clamp_min_(0);  // [Q, K]
  if (clamp_len >= 0) dist.clamp_max_(clamp_len);
  return dist.to(dtype);  // [Q, K]
}

}  // namespace txl::ops
