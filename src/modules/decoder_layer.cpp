#include "txl/modules/decoder_layer.h"

#include "txl/util/error.h"

namespace txl::modules {

DecoderLayerImpl::DecoderLayerImpl(const DecoderLayerOptions& options) : options_(options) {
  TXL_CHECK(options.dropout >= 0.0 && options.dropout < 1.0,
            "decoder layer: dropout must be in [0, 1), got ", options.dropout);
  const int64_t d = options.attention.d_model;
  attn = register_module("attn", MultiHeadAttention(options.attention));
  FeedForwardOptions ff_options;
  ff_options.d_model = d;
  ff_options.d_inner = options.d_inner;
  ff_options.dropout = options.dropout;
  ff_options.init = options.init;
  ff = register_module("ff", FeedForward(ff_options));
  attn_norm = register_module("attn_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
  ff_norm = register_module("ff_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
  if (options.abs_positions > 0) {
    pos_emb = register_module(
        "pos_emb", LearnedPositions(options.abs_positions, std::vector<int64_t>{d}, options.init));
  }
  drop = register_module("drop", Dropout(options.dropout));
  reset_parameters(options.init);
}

void DecoderLayerImpl::reset_parameters(const InitOptions& init) {
  attn->reset_parameters(init);
  ff->reset_parameters(init);
  init_layer_norm(attn_norm, init);
  init_layer_norm(ff_norm, init);
  if (pos_emb) pos_emb->reset_parameters(init);
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& memory,
                                        const AttentionInputs& inputs, torch::Tensor* probs,
                                        KeyValueCache* cache) {
  torch::Tensor h = x, mem = memory;
  const int64_t m_len = memory.defined() ? memory.size(1) : 0;
  TXL_CHECK(cache == nullptr || !pos_emb,
            "decoder layer: learned absolute positions change the memory's keys every segment; "
            "no key/value cache");
  if (pos_emb) {
    auto table = pos_emb->first(m_len + x.size(1));        // [K, d]
    if (m_len > 0) mem = mem + table.narrow(0, 0, m_len);  // [B, M, d]
    h = h + table.narrow(0, m_len, x.size(1));             // [B, Q, d]
  }
  if (options_.pre_norm) {
    // With a cache the memory's keys and values come from it: no need to normalise the memory.
    const bool cached = cache != nullptr && cache->memory.defined();
    auto a = h + drop(attn(attn_norm(h), m_len > 0 && !cached ? attn_norm(mem) : mem, inputs, probs, cache));
    return a + drop(ff(ff_norm(a)));  // [B, Q, d]
  }
  auto a = attn_norm(h + drop(attn(h, mem, inputs, probs, cache)));  // [B, Q, d]
  return ff_norm(a + drop(ff(a)));                            // [B, Q, d]
}

}  // namespace txl::modules
