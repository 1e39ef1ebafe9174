#pragma once
// Multi-head self-attention over concat(memory, segment), with the position schemes of the
// ablation (docs/model.md sections 3, 4, 6):
//   kRelative  Transformer-XL (paper 3.3): score = (q_i + u)^T k_j + (q_i + v)^T W_R R[M+i-j]
//   kShaw      Shaw et al. (2018): score = q_i^T k_j + q_i^T A[min(M+i-j, max_rel_dist)],
//              A a learned table per layer
//   kAbsolute  Vaswani et al.: score = q_i^T k_j (positions were added to the inputs)
//   kRotary    Su et al. (2021), RoPE: score = (R_{M+i} q_i)^T (R_j k_j), R_p turning each pair of
//              dimensions by p times its frequency (ops/rotary.h), so the score sees i - j only
//   kAlibi     Press et al. (2022): score = q_i^T k_j - m_h (M+i-j), a slope m_h per head
//              (ops/alibi.h) times the distance, which clamp_len clamps
// Positions over memory: key j of concat(memory, segment) sits at position j and query i at
// M + i, so every scheme but kAbsolute sees the distance M + i - j whatever the segment; the
// decoder's buffer slots stand for positions the same way.
// Scores are divided by sqrt(D), blocked (future, padding, window) keys get a large finite
// negative score, softmax, attention dropout, weighted sum of values, heads concatenated, W_o.
//
// W_q, W_k, W_v are one fused parameter (qkv.weight, rows q | k | v, as the paper code's
// qkv_net). Without memory it is one product over the segment. With memory, keys and values are
// one product over concat(memory, segment) and queries one over the segment only: the paper
// code's single product over concat also projects queries for the M memory positions and then
// drops them (1/6 of the QKV work at M = Q, plus a zero-filled gradient buffer).
//
// Decoding (step): the same scores and mixing (one function each, relative_scores and mix) for a
// few new tokens per row whose keys and values go into a buffer the decoder keeps for the layer,
// [2, H, B, C, D]; the position encodings of every distance 0 .. C-1 are projected once
// (prepare_step). One query per row on the CPU goes through ops::attend_cached, a fused kernel of
// the same definition.
//
// Legend: B batch, Q query length, M memory length, K = M + Q keys, H heads, D head size,
// d model width, q tokens of a decoding step, C slots of a decoding buffer. Internally heads
// lead ([H, B, ...]) so that every product is one batched GEMM without copies; no
// [B, H, Q, K, D] tensor is ever formed.

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "txl/modules/dropout.h"
#include "txl/modules/param_init.h"
#include "txl/modules/positions.h"
#include "txl/ops/projection.h"

namespace txl::modules {

enum class PositionScheme { kRelative, kShaw, kAbsolute, kRotary, kAlibi };

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
                             // kShaw: int64 [K] the same distances clipped to max_rel_dist;
                             // kRotary: cos, sin [2, K, D] of positions 0 .. K-1;
                             // kAlibi: distances [Q, K] (ops::query_key_distances)
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

// AttentionInputs::rel_pos for Q queries over K keys: kRelative the sinusoids R [K, d] of the
// distances K-1 .. 0 (clamped at clamp_len; -1 = no clamp), kShaw those distances clipped to
// max_rel_dist, int64 [K]; kRotary the turns of positions 0 .. K-1 [2, K, D]; kAlibi each
// query's distance to each key [Q, K], clamped at clamp_len; kAbsolute undefined.
torch::Tensor relative_positions(const AttentionOptions& options, int64_t q_len, int64_t k_len,
                                 int64_t clamp_len, torch::ScalarType dtype, torch::Device device);

// What the queries of one decoding step see in a layer's buffer; one for every layer (the
// decoder's bookkeeping).
struct StepMask {
  torch::Tensor bias;          // [B, q, K] additive: 0 where visible, blocked elsewhere; or
  std::vector<int64_t> first;  // bias undefined, one query per row: per row its first slot
  // Zero memory: per row, how many of the step's new slots (from its first) stand for the
  // row's zero memory (padding before the row's first token); empty = none.
  std::vector<int64_t> zero_slots;
};

// A layer's weights prepared for decoding, shared by every decoder of the model: copies
// (prepare again after the weights change).
struct AttentionStep {
  ops::Projection qkv;        // [3 H D, d], the query rows scaled by 1/sqrt(D)
  ops::Projection out;        // W_o
  torch::Tensor table;        // [H, D, C] encodings of distances C-1 .. 0 (relative, Shaw), or
                              // kRotary: cos, sin [2, C, D] of slots 0 .. C-1
  torch::Tensor by_distance;  // [H, C, D] the encodings of distances 0 .. C-1 (relative, Shaw)
  torch::Tensor slopes;       // kAlibi: [H, 1, 1, 1] the heads' slopes
  int64_t clamp_len = -1;     // kAlibi: distances above it count as it (-1 = no clamp)
  torch::Tensor u, v;         // kRelative: [H, 1, 1, D], scaled by 1/sqrt(D)
  torch::Tensor zero_kv;      // [2, H, 1, 1, D] the key and value of a zero memory row, or
                              // undefined (no zero memory)
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

  // Compressive memory's attention-reconstruction target (Rae et al. 2020): each head's
  // content-only attention (no position terms) of the queries of x [B, Q, d] over keys and
  // values of rows [B, N, d] where `visible` bool [B, N] allows, with this layer's weights as
  // constants (no gradient reaches them): [H, B, Q, D]. A row with no visible key gets the
  // values' mean (finite).
  torch::Tensor content_attention(const torch::Tensor& x, const torch::Tensor& rows,
                                  const torch::Tensor& visible) const;

  // Decoding with buffers of C = capacity slots: encodings for every distance below C (clamped
  // at clamp_len, -1 = no clamp), u and v (`shared_u`, `shared_v` [H, D] unless the layer has
  // its own), and when `zero_row` [1, d] is defined the key and value of that memory row.
  AttentionStep prepare_step(int64_t capacity, int64_t clamp_len, const torch::Tensor& shared_u,
                             const torch::Tensor& shared_v, const torch::Tensor& zero_row);
  // The step of q new tokens h [B, q, d] (normalised when pre_norm): writes their keys and
  // values into slots used .. used + q - 1 of kv [2, H, B, C, D] (and the zero memory's where
  // mask.zero_slots says), and returns their attention over slots 0 .. used + q - 1 as the
  // mask allows, [B, q, d]. Without gradients.
  torch::Tensor step(const AttentionStep& weights, const torch::Tensor& h, const torch::Tensor& kv,
                     int64_t used, const StepMask& mask);
  // Whether a step of one query per row reads StepMask::first (the fused kernel takes buffers
  // like `like` and this position scheme) rather than a score bias.
  bool steps_by_first_slot(const torch::Tensor& like) const;
  // Writes the zero memory's key and value into `slots` [2, H, B', n, D] (a view of a buffer).
  static void write_zero_memory(const AttentionStep& weights, const torch::Tensor& slots);

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
  // Scaled scores [H, B, Q, K] before masking: content only for absolute positions, of the turned
  // queries and keys for kRotary, content plus ALiBi's distance terms for kAlibi, content plus
  // realigned position terms (with u and v for kRelative) otherwise.
  torch::Tensor position_scores(const Heads& heads, const AttentionInputs& inputs);
  // The position terms' encodings [H, D, K] of rel_pos (relative_positions): W_R R (kRelative)
  // or Shaw's learned rows (kShaw).
  torch::Tensor encodings(const torch::Tensor& rel_pos);
  // q_content . k_j + q_position . r_j', queries [H, B, Q, D] (scaled), keys [H, B, K, D], r
  // [H, D, K] the encodings of distances K-1 .. 0 (the last query's), realigned for the earlier
  // queries (appendix B); r undefined: the content term alone (absolute positions).
  static torch::Tensor relative_scores(const torch::Tensor& q_content,
                                       const torch::Tensor& q_position, const torch::Tensor& keys,
                                       const torch::Tensor& r);
  // softmax(scores + bias) over the keys, attention dropout, the values' weighted sum, heads
  // merged and W_o: scores [H, B, Q, K], bias broadcast to it, values [H, B, K, D] -> [B, Q, d].
  torch::Tensor mix(torch::Tensor scores, const torch::Tensor& bias, const torch::Tensor& values,
                    const ops::Projection& out_weight, torch::Tensor* probs);
  // kAlibi: scores [H, B, Q, K] less each head's slope times the distances [Q, K].
  static torch::Tensor add_alibi(torch::Tensor scores, const torch::Tensor& slopes,
                                 const torch::Tensor& distances);
  // Zero memory: the step's slots that mask.zero_slots names get the zero memory's keys.
  static void write_zero_slots(const AttentionStep& weights, const torch::Tensor& kv, int64_t used,
                               const StepMask& mask);

  AttentionOptions options_;
};
TORCH_MODULE(MultiHeadAttention);

}  // namespace txl::modules
