#pragma once
// One decoder layer (docs/model.md section 5):
//   post-norm (default):  a = LN(x + drop(attn(x, mem)));    out = LN(a + drop(ff(a)))
//   pre-norm:             a = x + drop(attn(LN(x), LN(mem))); out = a + drop(ff(LN(a)))
// A position scheme with a layer's part (modules/position_scheme.h: learned absolute positions)
// adds its positions to the layer's input and memory before attending.
//
// The decoding step runs the same residual formula (one function, `residual`) over the
// attention's and the feed-forward's steps.
//
// Legend: B batch, Q query length, M memory length, K = M + Q keys, d model width, q tokens of
// a decoding step, C slots of its buffer.

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "txl/modules/attention.h"
#include "txl/modules/dropout.h"
#include "txl/modules/feed_forward.h"
#include "txl/modules/position_scheme.h"

namespace txl::modules {

struct DecoderLayerOptions {
  AttentionOptions attention;
  int64_t d_inner = 1024;
  double dropout = 0.1;  // residual dropout and feed-forward inner dropout
  bool pre_norm = false;
  InitOptions init;
};

// A layer's weights prepared for decoding (copies; prepare again after the weights change).
struct DecoderLayerStep {
  AttentionStep attn;
  FeedForwardStep ff;
};

class DecoderLayerImpl : public torch::nn::Module {
 public:
  explicit DecoderLayerImpl(const DecoderLayerOptions& options);

  // x [B, Q, d], memory [B, M, d] or undefined -> [B, Q, d]. `probs` and `cache` as in
  // attention; a scheme whose layer part adds positions to the memory anew each segment
  // (PositionTraits::caches_memory_kv false) takes no cache (a cache on it is an error).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& memory,
                        const AttentionInputs& inputs, torch::Tensor* probs = nullptr,
                        KeyValueCache* cache = nullptr);

  void reset_parameters(const InitOptions& init);

  // The attention-reconstruction loss of a summary of rows (compressive memory's, Rae et al.
  // 2020, algorithm 2): the mean squared difference between the content attention
  // (MultiHeadAttentionImpl::content_attention) of the segment's queries x [B, Q, d] over rows
  // [B, G c, d] with rows_mask bool [B, G c], and over their summary [B, G, d] with summary_mask
  // bool [B, G]. Stop-gradients: x, rows and this layer's weights (the norm's too, with
  // pre_norm) are constants, so that only what made the summary learns from it. Averaged over the
  // real queries (query_mask bool [B, Q]) of rows with a real row; a scalar.
  torch::Tensor reconstruction_loss(const torch::Tensor& x, const torch::Tensor& rows,
                                    const torch::Tensor& rows_mask, const torch::Tensor& summary,
                                    const torch::Tensor& summary_mask,
                                    const torch::Tensor& query_mask);

  // Decoding with buffers of C slots (see MultiHeadAttentionImpl::prepare_step); with
  // zero_memory, the key and value of the memory's zero rows as this layer sees them (after its
  // norm when pre_norm, as the forward normalises its memory).
  DecoderLayerStep prepare_step(const PositionInputs& slots, int64_t clamp_len, bool zero_memory);
  // The step of q new tokens x [B, q, d] -> [B, q, d] over the layer's buffer kv [2, H, B, C, D]
  // with `used` slots filled (see MultiHeadAttentionImpl::step). `positions` int64 [B, q]: the
  // tokens' absolute positions (schemes with absolute positions), else undefined.
  torch::Tensor step(const DecoderLayerStep& weights, const torch::Tensor& x,
                     const torch::Tensor& kv, int64_t used, const StepMask& mask,
                     const torch::Tensor& positions);

  // The keys and values [2, H, B, n, D] this layer's attention makes of rows x [B, n, d] (after
  // its norm when pre_norm), with its weights as constants (no gradient).
  torch::Tensor keys_values(const torch::Tensor& x);
  // Writes the keys and values of rows x [B, n, d] this layer reads before a step's tokens (a
  // memory's, as the forward reads them: after the norm when pre_norm) into `slots`
  // [2, H, B, n, D] of its buffer. Not for a scheme whose layer part adds positions to them.
  void write_keys(const DecoderLayerStep& weights, const torch::Tensor& x,
                  const torch::Tensor& slots);

  MultiHeadAttention attn{nullptr};
  FeedForward ff{nullptr};
  torch::nn::LayerNorm attn_norm{nullptr}, ff_norm{nullptr};
  Dropout drop{nullptr};

 private:
  using Block = std::function<torch::Tensor(const torch::Tensor&)>;
  // The layer's formula around its attention and feed-forward blocks, [B, Q, d] -> [B, Q, d]:
  // post-norm LN(h + drop(attend(h))) then LN(a + drop(feed(a))); pre-norm with the norms
  // inside the residual branches. `attend` receives the (normalised) segment.
  torch::Tensor residual(const torch::Tensor& h, const Block& attend, const Block& feed);

  DecoderLayerOptions options_;
  std::unique_ptr<LayerPositions> positions_;  // the scheme's layer part, or none
};
TORCH_MODULE(DecoderLayer);

}  // namespace txl::modules
