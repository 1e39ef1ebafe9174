#include "txl/modules/decoder_layer.h"

#include "txl/ops/layer_norm.h"
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
  positions_ = attn->scheme().for_layer(*this, options.attention.position_shape());
  drop = register_module("drop", Dropout(options.dropout));
  reset_parameters(options.init);
}

void DecoderLayerImpl::reset_parameters(const InitOptions& init) {
  attn->reset_parameters(init);
  ff->reset_parameters(init);
  init_layer_norm(attn_norm, init);
  init_layer_norm(ff_norm, init);
  if (positions_) positions_->reset_parameters(init);
}

torch::Tensor DecoderLayerImpl::residual(const torch::Tensor& h, const Block& attend,
                                         const Block& feed) {
  if (options_.pre_norm) {
    auto a = h + drop(attend(attn_norm(h)));  // [B, Q, d]
    return a + drop(feed(ff_norm(a)));        // [B, Q, d]
  }
  auto add_norm = [](torch::nn::LayerNorm& norm, const torch::Tensor& x, const torch::Tensor& y) {
    return ops::residual_layer_norm(x, y, norm->weight, norm->bias, norm->options.eps());
  };
  auto a = add_norm(attn_norm, h, drop(attend(h)));  // [B, Q, d]
  return add_norm(ff_norm, a, drop(feed(a)));        // [B, Q, d]
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& memory,
                                        const AttentionInputs& inputs, torch::Tensor* probs,
                                        KeyValueCache* cache) {
  torch::Tensor h = x, mem = memory;
  const int64_t m_len = memory.defined() ? memory.size(1) : 0;
  TXL_CHECK(cache == nullptr || attn->scheme().traits().caches_memory_kv,
            "decoder layer: ", attn->scheme().name(),
            " positions change the memory's keys every segment; no "
            "key/value cache");
  if (positions_) positions_->add(h, mem);
  // Pre-norm normalises the memory too; with a cache its keys and values come from it instead.
  const bool cached = cache != nullptr && cache->memory.defined();
  const bool norm_memory = options_.pre_norm && m_len > 0 && !cached;
  return residual(
      h,
      [&](const torch::Tensor& segment) {
        return attn(segment, norm_memory ? attn_norm(mem) : mem, inputs, probs, cache);
      },
      [&](const torch::Tensor& a) { return ff(a); });  // [B, Q, d]
}

torch::Tensor DecoderLayerImpl::reconstruction_loss(const torch::Tensor& x,
                                                    const torch::Tensor& rows,
                                                    const torch::Tensor& rows_mask,
                                                    const torch::Tensor& summary,
                                                    const torch::Tensor& summary_mask,
                                                    const torch::Tensor& query_mask) {
  // What the attention reads: pre-norm normalises its inputs, with the norm's weights constant.
  auto seen = [&](const torch::Tensor& t) {
    if (!options_.pre_norm) return t;
    return torch::layer_norm(t, {t.size(-1)}, attn_norm->weight.detach(), attn_norm->bias.detach(),
                             attn_norm->options.eps());
  };
  const auto queries = seen(x.detach());  // [B, Q, d]
  const auto target =
      attn->content_attention(queries, seen(rows.detach()), rows_mask);  // [H, B, Q, D]
  const auto got = attn->content_attention(queries, seen(summary), summary_mask);
  const auto counted = query_mask
                           .logical_and(rows_mask.any(1, /*keepdim=*/true))  // [B, Q]
                           .unsqueeze(0)
                           .unsqueeze(3)
                           .to(got.scalar_type());  // [1, B, Q, 1]
  const auto squares = (got - target).pow(2).mul(counted).sum();
  const double per_query = static_cast<double>(target.size(0) * target.size(3));  // H D
  return squares / counted.sum().mul(per_query).clamp_min(1.0);
}

DecoderLayerStep DecoderLayerImpl::prepare_step(const PositionInputs& slots, int64_t clamp_len,
                                                bool zero_memory) {
  torch::NoGradGuard no_grad;
  torch::Tensor zero_row;  // [1, d]: a memory row of zeros as the attention reads it
  if (zero_memory) {
    zero_row = torch::zeros({1, options_.attention.d_model}, attn->qkv->weight.options());
    if (options_.pre_norm) zero_row = attn_norm(zero_row);
  }
  return {attn->prepare_step(slots, clamp_len, zero_row), ff->prepare_step()};
}

torch::Tensor DecoderLayerImpl::step(const DecoderLayerStep& weights, const torch::Tensor& x,
                                     const torch::Tensor& kv, int64_t used, const StepMask& mask,
                                     const torch::Tensor& positions) {
  const torch::Tensor h = positions_ ? positions_->add_at(x, positions) : x;  // [B, q, d]
  return residual(
      h,
      [&](const torch::Tensor& segment) {
        return attn->step(weights.attn, segment, kv, used, mask);
      },
      [&](const torch::Tensor& a) { return ff->step(weights.ff, a); });  // [B, q, d]
}

torch::Tensor DecoderLayerImpl::keys_values(const torch::Tensor& x) {
  torch::NoGradGuard no_grad;
  TXL_CHECK(!positions_, "decoder layer: ", attn->scheme().name(),
            " positions change the rows' keys with their place; no keys of rows alone");
  return attn->keys_values(options_.pre_norm ? attn_norm(x) : x);  // [2, H, B, n, D]
}

void DecoderLayerImpl::write_keys(const DecoderLayerStep& weights, const torch::Tensor& x,
                                  const torch::Tensor& slots) {
  TXL_CHECK(!positions_, "decoder layer: ", attn->scheme().name(),
            " positions change the rows' keys with their place; no keys written before a step");
  attn->write_keys(weights.attn, options_.pre_norm ? attn_norm(x) : x, slots);
}

}  // namespace txl::modules
