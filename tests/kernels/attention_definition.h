#pragma once
// kernels::attend_cached by its definition, with tensor ops (cached_attention_test and the
// cross-level test): scores of the content and the relative position, the visible keys only,
// softmax, weighted values.

#include <torch/torch.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "txl/kernels/cached_attention.h"

namespace txl::test {

// out [B, H D] in the inputs' dtype, on copies (the buffer as it is after the write of the new
// key and value). With `cut` > 0 the last `cut` features are left out of the scores (what a kernel
// without its tail computes). `scale`, when given, receives [B, H D]: max |v| (1 + the largest
// sum of absolute score terms) of each (row, head), which bounds the rounding of the output.
inline torch::Tensor attention_definition(const torch::Tensor& qkv,
                                          const kernels::CachedKeys& cached, int64_t k_len,
                                          const std::vector<int64_t>& first_slots, int64_t cut = 0,
                                          torch::Tensor* scale = nullptr) {
  const int64_t batch = qkv.size(0), heads = qkv.size(2), d = qkv.size(3);
  auto buffer = cached.buffer.clone();  // [2, H, B, C, D]
  buffer.select(3, k_len - 1).copy_(qkv.narrow(1, 1, 2).permute({1, 2, 0, 3}));
  auto keys = buffer[0].narrow(2, 0, k_len);                               // [H, B, K, D]
  auto values = buffer[1].narrow(2, 0, k_len);                             // [H, B, K, D]
  auto q = qkv.select(1, 0).transpose(0, 1).unsqueeze(2);                  // [H, B, 1, D]
  auto qc = cached.u.defined() ? q + cached.u.view({heads, 1, 1, d}) : q;  // [H, B, 1, D]
  auto qp = cached.v.defined() ? q + cached.v.view({heads, 1, 1, d}) : q;  // [H, B, 1, D]
  auto kept = [&](const torch::Tensor& t) { return t.narrow(-1, 0, d - cut); };
  auto scores = torch::matmul(kept(qc), kept(keys).transpose(-1, -2));  // [H, B, 1, K]
  auto sizes = torch::matmul(qc.abs(), keys.abs().transpose(-1, -2));   // [H, B, 1, K]
  if (cached.by_distance.defined()) {
    auto distance = (k_len - 1) - torch::arange(k_len, torch::kLong);      // [K]
    auto r = cached.by_distance.index_select(1, distance).unsqueeze(1);    // [H, 1, K, D]
    scores = scores + torch::matmul(kept(qp), kept(r).transpose(-1, -2));  // [H, B, 1, K]
    sizes = sizes + torch::matmul(qp.abs(), r.abs().transpose(-1, -2));    // [H, B, 1, K]
  }
  auto first = torch::tensor(first_slots, torch::kLong).view({1, batch, 1, 1});     // [1, B, 1, 1]
  auto hidden = torch::arange(k_len, torch::kLong).view({1, 1, 1, k_len}) < first;  // [1, B, 1, K]
  scores = scores.masked_fill(hidden, -std::numeric_limits<double>::infinity());
  auto out = torch::matmul(torch::softmax(scores, -1), values);  // [H, B, 1, D]
  if (scale != nullptr) {
    auto top = values.abs().amax({2, 3}, true) *
               (1 + sizes.masked_fill(hidden, 0).amax(-1, true));  // [H, B, 1, 1]
    *scale = top.expand({heads, batch, 1, d}).transpose(0, 1).reshape({batch, heads * d});
  }
  return out.squeeze(2).transpose(0, 1).reshape({batch, heads * d});  // [B, H D]
}

}  // namespace txl::test
