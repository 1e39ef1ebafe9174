#pragma once
// The tiny model of the model-level tests (models, compressive memory, decoding).

#include "txl/config/config.h"

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

}  // namespace txl::test
