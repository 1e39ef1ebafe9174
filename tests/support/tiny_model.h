#pragma once
// The tiny model of the model-level tests (models, compressive memory, decoding).

#include <torch/torch.h>

#include <cstdint>

#include "txl/config/config.h"
#include "txl/models/transformer_lm.h"

namespace txl::test {

// 2 layers, d_model 8, 2 heads of 4, d_inner 16, segments of tgt_len with a memory of mem_len,
// Shaw distances clipped at 6, 64 learned positions; dropout 0.1 and dropatt 0.1 (the tests run
// in evaluation mode unless they say otherwise), and large weights (std 0.3): sharp,
// position-sensitive attention, so that the tests can fail.
inline config::ModelConfig tiny_model_config(config::AttnType attn_type, int tgt_len, int mem_len) {
  config::ModelConfig c;
  c.attn_type = attn_type;
  c.n_layer = 2;
  c.d_model = 8;
  c.n_head = 2;
  c.d_head = 4;
  c.d_inner = 16;
  c.dropout = 0.1;
  c.dropatt = 0.1;
  c.tgt_len = tgt_len;
  c.mem_len = mem_len;
  c.max_rel_dist = 6;
  c.max_positions = 64;
  c.init_std = 0.3;
  c.proj_init_std = 0.3;
  return c;
}

// The model of `c` for a vocabulary of `vocab`, built from seed 3, in `dtype` (double: any
// difference is a bug, not rounding), in evaluation mode.
inline models::TransformerLM tiny_model(const config::ModelConfig& c, int64_t vocab,
                                        torch::ScalarType dtype = torch::kDouble) {
  torch::manual_seed(3);
  models::TransformerLM model(c, vocab);
  model->to(dtype);
  model->eval();
  return model;
}

// Token ids int64 [rows, length] below `vocab`, from `seed`.
inline torch::Tensor random_tokens(int64_t rows, int64_t length, int64_t vocab, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(vocab, {rows, length}, torch::kLong);
}

// One segment, tokens int64 [B, T], over `memory` in the model's own context (memory_grad as
// asked), with targets (3 t + 1) mod vocab and the log-probabilities.
inline models::LMOutput run_segment(models::TransformerLM& model, const torch::Tensor& tokens,
                                    const models::Memory& memory, int64_t vocab,
                                    const torch::Tensor& input_mask = {},
                                    const torch::Tensor& reset = {}, bool memory_grad = false) {
  models::Inputs in;
  in.tokens = tokens;
  in.targets = (tokens * 3 + 1).remainder(vocab);
  in.input_mask = input_mask;
  in.reset = reset;
  auto ctx = model->default_lookback();
  ctx.memory_grad = memory_grad;
  return model->forward(in, memory, ctx, /*want_logits=*/true);
}

}  // namespace txl::test
