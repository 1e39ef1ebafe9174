#pragma once
// Matrix-multiply FLOPs per token of the language model (2 FLOPs per multiply-add), for
// throughput figures (model FLOPs utilisation) in the bench.
//
// Per query token, with Q = tgt_len, M = mem_len, K = M + Q, H heads of D, d model width,
// F = d_inner, V vocabulary, per layer:
//   queries over the segment                2 d (H D)
//   keys, values over concat(memory, seg.)  2 d (2 H D) K / Q    (2 d (2 H D) when the memory's
//                                                                 keys and values are cached)
//   scores q.k over K keys                  2 H D K        (computed for all K; causal masking
//   position scores (xl, shaw)              2 H D K         does not skip work)
//   weighted sum of values                  2 H D K
//   output projection W_o                   2 H D d
//   feed-forward                            4 d F
// plus the output layer: 2 d V for a plain softmax; with cutoffs, the head 2 d (c_1 + n) and
// every tail cluster k 2 d d_k (projection, div_val > 1) + 2 d_k V_k, i.e. every cluster for
// every token (what log_prob computes; nll visits a tail only for its own tokens, so real
// training costs a little less). Adaptive input projections (div_val > 1) add 2 d_0 d.
// The memory mechanisms add their keys and work (MemoryMechanism::keys, flops_per_token): a
// compressive memory of N rows K = N + M + Q keys, and with the conv compressor 2 d d per token
// for compressing the rows that leave (c rows of d into one of d for every c tokens).
// Not counted: W_R R (computed once per segment for the whole batch: under 1/B of one
// projection), embedding lookups, LayerNorm, softmax and other element-wise work, and the
// mechanisms' training losses (compressive memory's attention reconstruction).
// Training = 3 x forward (the backward pass costs two products per forward product).

#include <cstdint>

#include "txl/config/config.h"

namespace txl::models {

struct FlopsPerToken {
  double forward = 0.0;
  double training = 0.0;  // forward + backward = 3 x forward
};

// memory_kv_cached: evaluation with Lookback::cache_kv, which projects keys and values for the
// segment's rows only (vanilla_learned never caches). Throws txl::Error for a negative length
// or vocabulary.
FlopsPerToken count_flops_per_token(const config::ModelConfig& config, int64_t vocab,
                                    int64_t tgt_len, int64_t mem_len,
                                    bool memory_kv_cached = false);

}  // namespace txl::models
