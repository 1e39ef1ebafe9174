#pragma once
// Multi-head self-attention over concat(memory, segment) (docs/model.md sections 3, 4, 6). How it
// knows positions is its position scheme's (modules/position_scheme.h: Transformer-XL's relative
// encodings, Shaw's table, rotary turns, linear biases, or none where positions were added to the
// input); the scheme's part gives the scores of the queries over the keys, and this module does
// the rest: scores divided by sqrt(D) (in the scheme's scores), blocked (future, padding, window)
// keys get a large finite negative score, softmax, attention dropout, weighted sum of values,
// heads concatenated, W_o.
//
// W_q, W_k, W_v are one fused parameter (qkv.weight, rows q | k | v, as the paper code's
// qkv_net). Without memory it is one product over the segment. With memory, keys and values are
// one product over concat(memory, segment) and queries one over the segment only: the paper
// code's single product over concat also projects queries for the M memory positions and then
// drops them (1/6 of the QKV work at M = Q, plus a zero-filled gradient buffer).
//
// Decoding (step): the same scores and mixing for a few new tokens per row whose keys and values
// go into a buffer the decoder keeps for the layer, [2, H, B, C, D]; the scheme prepares its
// tables for the C slots once (prepare_step). One query per row on the CPU goes through
// ops::attend_cached, a fused kernel of the same definition, where the scheme's traits allow.
//
// Legend: B batch, Q query length, M memory length, K = M + Q keys, H heads, D head size,
// d model width, q tokens of a decoding step, C slots of a decoding buffer. Internally heads
// lead ([H, B, ...]) so that every product is one batched GEMM without copies; no
// [B, H, Q, K, D] tensor is ever formed.

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "txl/modules/dropout.h"
#include "txl/modules/param_init.h"
#include "txl/modules/position_scheme.h"
#include "txl/ops/projection.h"

namespace txl::modules {

struct AttentionOptions {
  int64_t d_model = 256;      // d
  int64_t n_head = 4;         // H
  int64_t d_head = 64;        // D (H * D need not equal d)
  double dropatt = 0.0;       // dropout on the attention probabilities
  PositionOptions positions;  // the position scheme and its settings
  InitOptions init;

  // What the position scheme's parts read.
  PositionShape position_shape() const { return {d_model, n_head, d_head, positions, init}; }
};

// What a layer's attention reads besides its keys (a kNN memory's nearest stored keys): from
// the queries [H, B, Q, D] (scaled by 1/sqrt(D)) and the heads' output of its own attention
// [H, B, Q, D], the heads' output it goes on with (before W_o), [H, B, Q, D].
using ContextHook =
    std::function<torch::Tensor(const torch::Tensor& queries, const torch::Tensor& context)>;

// Inputs computed once per segment and shared by every layer.
struct AttentionInputs {
  torch::Tensor blocked;     // bool [1, B or 1, Q, K], true = key hidden from the query
  torch::Tensor score_bias;  // optional: ops::score_bias(blocked), computed once per segment;
                             // derived from `blocked` by each layer when absent
  PositionInputs positions;  // the scheme's inputs for Q queries over K keys
  ContextHook context;       // one layer's own (a copy of the inputs); empty = none
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

// What the queries of one decoding step see in a layer's buffer; one for every layer (the
// decoder's bookkeeping).
struct StepMask {
  torch::Tensor bias;          // [B, q, K] additive: 0 where visible, blocked elsewhere; or
  std::vector<int64_t> first;  // bias undefined, one query per row: per row its first slot
  // Zero memory: per row, how many of the step's new slots (from its first) stand for the
  // row's zero memory (padding before the row's first token); empty = none.
  std::vector<int64_t> zero_slots;
  ContextHook context;  // as AttentionInputs::context, for the layer of this mask
};

// A layer's weights prepared for decoding, shared by every decoder of the model: copies
// (prepare again after the weights change).
struct AttentionStep {
  ops::Projection qkv;     // [3 H D, d], the query rows scaled by 1/sqrt(D)
  ops::Projection out;     // W_o
  PositionStep positions;  // the scheme's tables for the C slots
  torch::Tensor zero_kv;   // [2, H, 1, 1, D] the key and value of a zero memory row, or
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

  // Decoding with buffers of C slots: the scheme's tables for `slots` (its inputs for one query
  // over C keys, distances clamped at clamp_len, -1 = no clamp), and when `zero_row` [1, d] is
  // defined the key and value of that memory row.
  AttentionStep prepare_step(const PositionInputs& slots, int64_t clamp_len,
                             const torch::Tensor& zero_row);
  // The step of q new tokens h [B, q, d] (normalised when pre_norm): writes their keys and
  // values into slots used .. used + q - 1 of kv [2, H, B, C, D] (and the zero memory's where
  // mask.zero_slots says), and returns their attention over slots 0 .. used + q - 1 as the
  // mask allows, [B, q, d]. Without gradients.
  torch::Tensor step(const AttentionStep& weights, const torch::Tensor& h, const torch::Tensor& kv,
                     int64_t used, const StepMask& mask);
  // The keys and values [2, H, B, n, D] of rows h [B, n, d] (normalised when pre_norm), with the
  // weights as constants (no gradient).
  torch::Tensor keys_values(const torch::Tensor& h) const;
  // Writes the keys and values of rows h [B, n, d] (normalised when pre_norm) into `slots`
  // [2, H, B, n, D] (a view of a buffer), as a step writes its new tokens'. Without gradients.
  void write_keys(const AttentionStep& weights, const torch::Tensor& h,
                  const torch::Tensor& slots) const;
  // Whether a step of one query per row reads StepMask::first (the fused kernel takes buffers
  // like `like` and what this position scheme offers) rather than a score bias.
  bool steps_by_first_slot(const torch::Tensor& like) const;
  const PositionScheme& scheme() const { return *scheme_; }
  // Writes the zero memory's key and value into `slots` [2, H, B', n, D] (a view of a buffer).
  static void write_zero_memory(const AttentionStep& weights, const torch::Tensor& slots);

  torch::nn::Linear qkv{nullptr};  // fused W_q, W_k, W_v: d -> 3 H D, no bias (paper code)
  torch::nn::Linear out{nullptr};  // W_o: H D -> d, no bias
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
  // softmax(scores + bias) over the keys, attention dropout, the values' weighted sum, heads
  // merged and W_o: scores [H, B, Q, K], bias broadcast to it, values [H, B, K, D] -> [B, Q, d].
  // With `context` (and the queries [H, B, Q, D], scaled) the heads' output goes through it.
  torch::Tensor mix(torch::Tensor scores, const torch::Tensor& bias, const torch::Tensor& values,
                    const ops::Projection& out_weight, torch::Tensor* probs,
                    const ContextHook& context = {}, const torch::Tensor& queries = {});
  // The step weights' queries (scaled), keys and values of rows h [B, n, d]: [3, H, B, n, D], a
  // view.
  torch::Tensor project_heads(const AttentionStep& weights, const torch::Tensor& h) const;
  // Zero memory: the step's slots that mask.zero_slots names get the zero memory's keys.
  static void write_zero_slots(const AttentionStep& weights, const torch::Tensor& kv, int64_t used,
                               const StepMask& mask);

  AttentionOptions options_;
  const PositionScheme* scheme_;
  std::unique_ptr<AttentionPositions> positions_;
};
TORCH_MODULE(MultiHeadAttention);

}  // namespace txl::modules
