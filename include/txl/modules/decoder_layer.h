#pragma once
// One decoder layer (MODEL.md section 5):
//   post-norm (default):  a = LN(x + drop(attn(x, mem)));    out = LN(a + drop(ff(a)))
//   pre-norm:             a = x + drop(attn(LN(x), LN(mem))); out = a + drop(ff(LN(a)))
// With learned absolute positions (vanilla_learned, Al-Rfou et al. 2018) the layer adds its
// own table's rows 0..K-1 to the keys concat(memory, segment) before attending, so positions
// are counted within the attention window.
//
// Legend: B batch, Q query length, M memory length, K = M + Q keys, d model width.

#include <torch/torch.h>

#include <cstdint>

#include "txl/modules/attention.h"
#include "txl/modules/dropout.h"
#include "txl/modules/feed_forward.h"
#include "txl/modules/positions.h"

namespace txl::modules {

struct DecoderLayerOptions {
  AttentionOptions attention;
  int64_t d_inner = 1024;
  double dropout = 0.1;  // residual dropout and feed-forward inner dropout
  bool pre_norm = false;
  int64_t abs_positions = 0;  // > 0: learned absolute positions table of this many rows
  InitOptions init;
};

class DecoderLayerImpl : public torch::nn::Module {
 public:
  explicit DecoderLayerImpl(const DecoderLayerOptions& options);

  // x [B, Q, d], memory [B, M, d] or undefined -> [B, Q, d]. `probs` and `cache` as in
  // attention; a layer with learned absolute positions (pos_emb) adds them to the memory anew
  // each segment, so it takes no cache (a cache on it is an error).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& memory,
                        const AttentionInputs& inputs, torch::Tensor* probs = nullptr,
                        KeyValueCache* cache = nullptr);

  void reset_parameters(const InitOptions& init);

  MultiHeadAttention attn{nullptr};
  FeedForward ff{nullptr};
  torch::nn::LayerNorm attn_norm{nullptr}, ff_norm{nullptr};
  LearnedPositions pos_emb{nullptr};  // vanilla_learned only: [abs_positions, d]
  Dropout drop{nullptr};

 private:
  DecoderLayerOptions options_;
};
TORCH_MODULE(DecoderLayer);

}  // namespace txl::modules
