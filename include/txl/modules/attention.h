#pragma once
// Multi-head self-attention over concat(memory, segment), with the position schemes of the
// ablation (MODEL.md sections 3, 4, 6):
//   kRelative  Transformer-XL (paper 3.3): score = (q_i + u)^T k_j + (q_i + v)^T W_R R[M+i-j]
//   kShaw      Shaw et al. (2018): score = q_i^T k_j + q_i^T A[min(M+i-j, max_rel_dist)],
//              A a learned table per layer
//   kAbsolute  Vaswani et al.: score = q_i^T k_j (positions were added to the inputs)
// Scores are divided by sqrt(D), blocked (future, padding, window) keys get a large finite
// negative score, softmax, attention dropout, weighted sum of values, heads concatenated, W_o.
//
// W_q, W_k, W_v are one fused parameter (qkv.weight, rows q | k | v, as the paper code's
// qkv_net). Without memory it is one product over the segment. With memory, keys and values are
// one product over concat(memory, segment) and queries one over the segment only: the paper
// code's single product over concat also projects queries for the M memory positions and then
// drops them (1/6 of the QKV work at M = Q, plus a zero-filled gradient buffer).
//
// Legend: B batch, Q query length, M memory length, K = M + Q keys, H heads, D head size,
// d model width. Internally heads lead ([H, B, ...]) so that every product is one batched GEMM
// without copies; no [B, H, Q, K, D] tensor is ever formed.

#include <torch/torch.h>

#include <cstdint>

#include "txl/modules/dropout.h"
#include "txl/modules/param_init.h"
#include "txl/modules/positions.h"

namespace txl::modules {

enum class PositionScheme { kRelative, kShaw, kAbsolute };

struct AttentionOptions {
  int64_t d_model = 256;  // d
  int64_t n_head = 4;     // H
  int64_t d_head = 64;    // D (H * D need not equal d)
  double dropatt = 0.0;   // dropout on the attention probabilities
  PositionScheme scheme = PositionScheme::kRelative;
  bool own_biases = false;    // kRelative: this layer has its own u, v (untie_r)
  int64_t max_rel_dist = 64;  // kShaw: distances clipped to this
  InitOptions init;
};

// Inputs computed once per segment and shared by every layer.
struct AttentionInputs {
  torch::Tensor blocked;     // bool [1, B or 1, Q, K], true = key hidden from the query
  torch::Tensor score_bias;  // optional: ops::score_bias(blocked), computed once per segment;
                             // derived from `blocked` by each layer when absent
  torch::Tensor rel_pos;     // kRelative: R [K, d] encodings of relative_distances(K, clamp_len);
                             // kShaw: int64 [K] the same distances clipped to max_rel_dist
  torch::Tensor u, v;        // kRelative without own_biases: the shared biases [H, D]
};

// Keys and values of the memory carried from one segment to the next (evaluation, where the
// weights do not change between segments): the memory's keys and values are then not projected
// again. A key/value row is a function of its layer input row alone, and the memory is those
// very rows (relative positions enter through R or the Shaw table; vanilla's sinusoid is already
// in the stored rows), so the rows a segment projected for its own positions are exactly those
// the next segment needs for them.
// Both are kept in the heads' layout, so that the next segment's keys and values are one
// concatenation of the cached and the new rows.
struct KeyValueCache {
  torch::Tensor memory;  // in: [2, H, B, M, D], keys and values of the memory rows; undefined =
                         // project them from the memory as usual
  torch::Tensor all;     // out: [2, H, B, K, D], keys and values of concat(memory, segment)
};

class MultiHeadAttentionImpl : public torch::nn::Module {
 public:
  explicit MultiHeadAttentionImpl(const AttentionOptions& options);

  // x [B, Q, d] (the segment), memory [B, M, d] or undefined (M = 0) -> [B, Q, d].
  // When `probs` is given it receives the attention probabilities [B, H, Q, K] (before
  // dropout), for inspection. With `cache`, cache->memory (when defined) stands for the
  // memory's keys and values, and cache->all receives those of every key row; only without
  // gradients (a cached projection would take no gradient).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& memory,
                        const AttentionInputs& inputs, torch::Tensor* probs = nullptr,
                        KeyValueCache* cache = nullptr);

  void reset_parameters(const InitOptions& init);
  const AttentionOptions& options() const { return options_; }

  torch::nn::Linear qkv{nullptr};     // fused W_q, W_k, W_v: d -> 3 H D, no bias (paper code)
  torch::nn::Linear out{nullptr};     // W_o: H D -> d, no bias
  torch::nn::Linear r_net{nullptr};   // kRelative: W_R, d -> H D
  LearnedPositions rel_key{nullptr};  // kShaw: [max_rel_dist + 1, H, D]
  torch::Tensor u_bias, v_bias;       // kRelative with own_biases: [H, D]
  Dropout dropatt{nullptr};

 private:
  // Queries [H, B, Q, D]; keys and values [H, B, K, D].
  struct Heads {
    torch::Tensor q, k, v;
  };
  // Checks every input's shape (and the cache's); returns M, the memory's length.
  int64_t check_inputs(const torch::Tensor& x, const torch::Tensor& memory,
                       const AttentionInputs& inputs, const KeyValueCache* cache) const;
  // Queries over the segment; keys and values over concat(memory, segment), from the cache's
  // memory rows when it has them, leaving every key row's keys and values in the cache.
  Heads project(const torch::Tensor& x, const torch::Tensor& memory, KeyValueCache* cache);
  // Scaled scores [H, B, Q, K] before masking: content only for absolute positions, content plus
  // realigned position terms (with u and v for kRelative) otherwise.
  torch::Tensor position_scores(const Heads& heads, const AttentionInputs& inputs);

  AttentionOptions options_;
};
TORCH_MODULE(MultiHeadAttention);

}  // namespace txl::modules
