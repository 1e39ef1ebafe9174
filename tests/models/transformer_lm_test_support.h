#pragma once
// Helpers shared by the TransformerLM tests: a tiny model of each attention type, its context,
// and one forward pass with fixed targets.

#include <cstdint>

#include "support/tiny_model.h"
#include "txl/models/transformer_lm.h"

namespace txl::models::transformer_lm_test {

inline constexpr int64_t kVocab = 11;

inline config::ModelConfig tiny(config::AttnType attn_type, int mem_len) {
  return txl::test::tiny_model_config(attn_type, /*tgt_len=*/5, mem_len);
}

inline TransformerLM make(const config::ModelConfig& c, uint64_t seed = 1,
                          torch::ScalarType dtype = torch::kFloat) {
  torch::manual_seed(seed);
  TransformerLM model(c, kVocab);
  model->to(dtype);
  model->eval();
  return model;
}

inline Lookback ctx_with(int64_t mem_len, int64_t clamp_len = -1, bool same_length = false) {
  Lookback ctx;
  ctx.mem_len = mem_len;
  ctx.clamp_len = clamp_len;
  ctx.same_length = same_length;
  return ctx;
}

inline LMOutput run(TransformerLM& model, const torch::Tensor& tokens, const Memory& memory,
                    const Lookback& ctx, const torch::Tensor& input_mask = {},
                    const torch::Tensor& reset = {}) {
  auto targets = (tokens * 3 + 1).remainder(kVocab);  // any fixed function of the input
  txl::models::Inputs inputs;
  inputs.tokens = tokens;          // int64 [B, T]
  inputs.targets = targets;        // int64 [B, T]
  inputs.input_mask = input_mask;  // bool [B, T] or undefined
  inputs.reset = reset;            // bool [B] or undefined
  return model->forward(inputs, memory, ctx, /*want_logits=*/true);
}

inline torch::Tensor random_tokens(int64_t batch, int64_t len, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(kVocab, {batch, len}, torch::kLong);
}

}  // namespace txl::models::transformer_lm_test
