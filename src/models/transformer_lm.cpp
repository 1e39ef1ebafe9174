#include "txl/models/transformer_lm.h"

#include <algorithm>
#include <optional>

#include "txl/modules/param_init.h"
#include "txl/ops/masks.h"
#include "txl/ops/projection.h"
#include "txl/util/error.h"
#include "txl/util/log.h"

namespace txl::models {

namespace {

void check_positive(int64_t value, const char* key) {
  TXL_CHECK(value > 0, "model.", key, " = ", value, " must be > 0");
}

// A scheme without distances (rotary turns) has nothing to clamp: a clamp would be ignored, so it
// is refused.
void check_clamp(const modules::PositionScheme& scheme, int64_t clamp_len, const char* what) {
  TXL_CHECK(scheme.traits().clampable || clamp_len == -1, what, " = ", clamp_len,
            " with attn_type ", scheme.name(),
            ": its positions have no distances to clamp; use -1");
}

// Throws txl::Error naming the `model.` key of an invalid setting; warns of absolute positions
// with memory where the config allows them. The scheme's own settings are its own to check
// (modules::PositionScheme::check, when its layers are made).
void check_config(const config::ModelConfig& config, const modules::PositionScheme& scheme,
                  int64_t n_token) {
  TXL_CHECK(n_token > 0, "model: vocabulary size n_token = ", n_token, " must be > 0");
  check_positive(config.n_layer, "n_layer");
  check_positive(config.d_model, "d_model");
  check_positive(config.n_head, "n_head");
  check_positive(config.d_head, "d_head");
  check_positive(config.d_inner, "d_inner");
  TXL_CHECK(config.dropout >= 0 && config.dropout < 1, "model.dropout = ", config.dropout,
            " must be in [0, 1)");
  TXL_CHECK(config.dropatt >= 0 && config.dropatt < 1, "model.dropatt = ", config.dropatt,
            " must be in [0, 1)");
  TXL_CHECK(config.mem_len >= 0, "model.mem_len = ", config.mem_len, " must be >= 0");
  TXL_CHECK(config.ext_len >= 0, "model.ext_len = ", config.ext_len, " must be >= 0");
  TXL_CHECK(config.clamp_len >= -1, "model.clamp_len = ", config.clamp_len,
            " must be -1 (no clamp) or >= 0");
  check_clamp(scheme, config.clamp_len, "model.clamp_len");
  const bool absolute = scheme.traits().absolute;
  TXL_CHECK(config.cmem_len >= 0, "model.cmem_len = ", config.cmem_len, " must be >= 0");
  TXL_CHECK(config.cmem_len == 0 || (config.mem_len > 0 && !absolute),
            "model.cmem_len = ", config.cmem_len,
            ": compressive memory compresses what leaves the memory and needs mem_len > 0 and "
            "relative positions (",
            modules::memory_scheme_names(), ")");
  TXL_CHECK(config.mem_tokens >= 0, "model.mem_tokens = ", config.mem_tokens, " must be >= 0");
  TXL_CHECK(config.mem_tokens == 0 || !absolute, "model.mem_tokens = ", config.mem_tokens,
            ": memory tokens sit before and after the segment and need relative positions (",
            modules::memory_scheme_names(), ")");
  if (absolute && config.mem_len > 0) {
    TXL_CHECK(config.allow_abs_with_memory, "model.attn_type = ", config.attn_type,
              " with model.mem_len = ", config.mem_len,
              ": absolute positions are confused across segments (paper 3.3); set "
              "model.mem_len: 0, or model.allow_abs_with_memory: true to run it anyway");
    log::warn("model",
              "attn_type {} with mem_len {}: absolute positions restart every segment, "
              "so memory positions collide with the segment's (paper 3.3)",
              config::to_string(config.attn_type), config.mem_len);
  }
}

}  // namespace

Lookback Lookback::from_config(const config::ModelConfig& config) {
  Lookback ctx;
  ctx.mem_len = config.mem_len;
  ctx.clamp_len = config.clamp_len;
  ctx.same_length = config.same_length;
  ctx.ext_len = config.ext_len;
  ctx.zero_memory = config.mem_init == config::MemInit::kZeros;
  ctx.cmem_len = config.cmem_len;
  return ctx;
}

TransformerLMImpl::TransformerLMImpl(const config::ModelConfig& config, int64_t n_token)
    : config_(config),
      n_token_(n_token),
      scheme_(&modules::position_scheme(config::to_string(config.attn_type))) {
  check_config(config, *scheme_, n_token);

  // The modules take the initialisations by name (they know no config): the table's names.
  const std::string weight_init = config::to_string(config.init);
  modules::InitOptions init{weight_init, config.init_std, config::to_string(config.norm_init)};
  const int64_t d = config.d_model;
  word_emb =
      register_module("word_emb", modules::AdaptiveEmbedding(modules::AdaptiveEmbeddingOptions{
                                      n_token, d, d, config.cutoffs, config.div_val,
                                      config.init_std, config.proj_init_std, weight_init}));
  attention_.d_model = d;
  attention_.n_head = config.n_head;
  attention_.d_head = config.d_head;
  attention_.dropatt = config.dropatt;
  attention_.positions.scheme = scheme_->name();
  attention_.positions.own_biases = config.untie_r;
  attention_.positions.max_rel_dist = config.max_rel_dist;
  attention_.positions.max_positions = config.max_positions;
  attention_.positions.t5_buckets = config.t5_buckets;
  attention_.positions.t5_max_distance = config.t5_max_distance;
  attention_.init = init;
  positions_ = scheme_->for_model(*this, attention_.position_shape());
  layers = register_module("layers", torch::nn::ModuleList());
  for (int i = 0; i < config.n_layer; ++i) {
    modules::DecoderLayerOptions o;
    o.attention = attention_;
    o.d_inner = config.d_inner;
    o.dropout = config.dropout;
    o.pre_norm = config.pre_norm;
    o.init = init;
    layer_list_.emplace_back(o);
    layers->push_back(layer_list_.back());
  }
  if (config.cmem_len > 0) {
    compressors = register_module("compressors", torch::nn::ModuleList());
    for (int i = 0; i < config.n_layer; ++i) {
      compressor_list_.emplace_back(
          modules::CompressorOptions{d, config.cmem_rate, config::to_string(config.cmem_compress)});
      compressors->push_back(compressor_list_.back());
    }
  }
  if (config.mem_tokens > 0) {
    // Recurrent memory tokens: what is added to the tokens read (alone at a stream's start), and
    // the tokens written.
    memory_read_emb = register_parameter("memory_read_emb", torch::empty({config.mem_tokens, d}));
    memory_write_emb = register_parameter("memory_write_emb", torch::empty({config.mem_tokens, d}));
    modules::init_weight(memory_read_emb, init);
    modules::init_weight(memory_write_emb, init);
  }
  TXL_CHECK(config::is_named(config.mem_init), "model.mem_init = \"",
            config::to_string(config.mem_init), "\" is not one of: empty, zeros");
  if (config.pre_norm && config.final_norm) {
    final_norm =
        register_module("final_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
    modules::init_layer_norm(final_norm, init);
  }
  crit = register_module(
      "crit", modules::AdaptiveLogSoftmax(
                  modules::AdaptiveSoftmaxOptions{
                      n_token, d, d, config.cutoffs, config.div_val, config.tie_weight,
                      config.tie_projs, config.init_std, config.proj_init_std, weight_init},
                  word_emb));
  drop = register_module("drop", modules::Dropout(config.dropout));
}

Inputs Inputs::of(const data::Batch& batch) {
  return {batch.tokens, batch.targets, batch.input_mask, batch.reset};
}

namespace {

// The compressed memory's rows: [B, N, d] per layer, detached, on the tokens' device, with a
// bool [B, N] mask.
void check_compressed(const Memory& memory, int64_t batch, int64_t d, const torch::Device& device) {
  if (memory.compressed.empty()) return;
  TXL_CHECK(memory.compressed.size() == memory.layers.size(), "model memory: compressed memory of ",
            memory.compressed.size(), " layers, the memory has ", memory.layers.size());
  const int64_t n = memory.compressed_length();
  for (size_t l = 0; l < memory.compressed.size(); ++l) {
    const auto& c = memory.compressed[l];
    TXL_CHECK(c.defined() && c.dim() == 3 && c.size(0) == batch && c.size(1) == n &&
                  c.size(2) == d && c.device() == device && !c.requires_grad(),
              "model memory: compressed layer ", l, " must be [B = ", batch, ", N = ", n,
              ", d = ", d, "] on ", device, " without gradient, got ",
              c.defined() ? c.sizes() : torch::IntArrayRef{});
  }
  const auto& mask = memory.compressed_mask;
  TXL_CHECK(mask.defined() && mask.dim() == 2 && mask.size(0) == batch && mask.size(1) == n &&
                mask.scalar_type() == torch::kBool,
            "model memory: compressed_mask must be bool [B = ", batch, ", N = ", n, "]");
}

}  // namespace

void TransformerLMImpl::check_memory_tokens(const Memory& memory, int64_t batch,
                                            const Lookback& ctx,
                                            const torch::Device& device) const {
  if (!memory.tokens.defined()) return;
  const auto& t = memory.tokens;
  const int64_t m = config_.mem_tokens;
  TXL_CHECK(m > 0, "model memory: holds memory tokens but the model has model.mem_tokens 0");
  TXL_CHECK(t.dim() == 3 && t.size(0) == batch && t.size(1) == m && t.size(2) == config_.d_model &&
                t.device() == device,
            "model memory: tokens must be [B = ", batch, ", m = ", m, ", d = ", config_.d_model,
            "] on ", device, ", got ", t.sizes(), " on ", t.device());
  TXL_CHECK(ctx.memory_grad || !t.requires_grad(),
            "model memory: the memory tokens require grad; memory must be detached unless the "
            "context says memory_grad");
}

void TransformerLMImpl::check_cache_kv(const Memory& memory) const {
  TXL_CHECK(scheme_->traits().caches_memory_kv, "model context: cache_kv with attn_type ",
            config_.attn_type,
            ", whose layers add positions to the memory's keys anew every "
            "segment");
  TXL_CHECK(can_cache_kv(),
            "model context: cache_kv with compressive memory or memory tokens, "
            "whose keys the cache does not hold");
  TXL_CHECK(!torch::GradMode::is_enabled(),
            "model context: cache_kv is for evaluation without "
            "gradients (cached keys and values would take no gradient)");
  TXL_CHECK(memory.kv.empty() || static_cast<int64_t>(memory.kv.size()) == config_.n_layer,
            "model memory: cached keys and values of ", memory.kv.size(),
            " layers, the model has n_layer = ", config_.n_layer);
}

void TransformerLMImpl::check_inputs(const Inputs& in, const Memory& memory,
                                     const Lookback& ctx) const {
  const auto& [tokens, targets, input_mask, reset] = in;
  TXL_CHECK(tokens.defined() && tokens.dim() == 2 && tokens.scalar_type() == torch::kLong &&
                tokens.size(0) > 0 && tokens.size(1) > 0,
            "model input: tokens must be a non-empty int64 [B, T], got ",
            tokens.defined() ? tokens.sizes() : torch::IntArrayRef{}, " ",
            tokens.defined() ? tokens.scalar_type() : torch::ScalarType::Undefined);
  const int64_t batch = tokens.size(0);
  const int64_t d = config_.d_model;
  if (targets.defined()) {
    TXL_CHECK(targets.sizes() == tokens.sizes() && targets.scalar_type() == torch::kLong,
              "model input: targets must be int64 [B, T] = ", tokens.sizes(), ", got ",
              targets.sizes(), " ", targets.scalar_type());
  }
  if (input_mask.defined()) {
    TXL_CHECK(input_mask.sizes() == tokens.sizes() && input_mask.scalar_type() == torch::kBool,
              "model input: input_mask must be bool [B, T] = ", tokens.sizes(), ", got ",
              input_mask.sizes(), " ", input_mask.scalar_type());
  }
  if (reset.defined()) {
    TXL_CHECK(reset.dim() == 1 && reset.size(0) == batch && reset.scalar_type() == torch::kBool,
              "model input: reset must be bool [B = ", batch, "], got ", reset.sizes(), " ",
              reset.scalar_type());
  }
  TXL_CHECK(ctx.mem_len >= 0, "model context: mem_len = ", ctx.mem_len, " must be >= 0");
  TXL_CHECK(ctx.ext_len >= 0, "model context: ext_len = ", ctx.ext_len, " must be >= 0");
  TXL_CHECK(ctx.clamp_len >= -1, "model context: clamp_len = ", ctx.clamp_len,
            " must be -1 (no clamp) or >= 0");
  check_clamp(*scheme_, ctx.clamp_len, "model context: clamp_len");
  TXL_CHECK(ctx.cmem_len >= 0, "model context: cmem_len = ", ctx.cmem_len, " must be >= 0");
  TXL_CHECK(ctx.cmem_len == 0 || !compressor_list_.empty(),
            "model context: cmem_len = ", ctx.cmem_len,
            " but the model has no compressors (model.cmem_len 0)");
  if (scheme_->traits().absolute) {
    TXL_CHECK((ctx.mem_len == 0 && memory.empty()) || config_.allow_abs_with_memory,
              "model context: attn_type ", config_.attn_type, " with mem_len = ", ctx.mem_len,
              " (memory of ", memory.length(),
              " positions): absolute positions need mem_len 0 unless "
              "model.allow_abs_with_memory is set");
  }
  if (ctx.cache_kv) check_cache_kv(memory);
  check_memory_tokens(memory, batch, ctx, tokens.device());
  if (memory.layers.empty()) return;
  TXL_CHECK(static_cast<int64_t>(memory.layers.size()) == config_.n_layer, "model memory: has ",
            memory.layers.size(), " layers, the model has n_layer = ", config_.n_layer,
            " (memory from another model?)");
  const int64_t m_len = memory.length();
  for (size_t l = 0; l < memory.layers.size(); ++l) {
    const auto& m = memory.layers[l];
    TXL_CHECK(
        m.defined() && m.dim() == 3 && m.size(0) == batch && m.size(1) == m_len && m.size(2) == d,
        "model memory: layer ", l, " must be [B = ", batch, ", M = ", m_len, ", d = ", d, "], got ",
        m.defined() ? m.sizes() : torch::IntArrayRef{},
        " (batch size or model width changed since the memory was made?)");
    TXL_CHECK(m.device() == tokens.device(), "model memory: layer ", l, " is on ", m.device(),
              ", the tokens on ", tokens.device(), " (memory made before the model was moved?)");
    TXL_CHECK(ctx.memory_grad || !m.requires_grad(), "model memory: layer ", l,
              " requires grad; memory must be detached (stop-gradient, paper 3.2) unless "
              "the context says memory_grad");
  }
  check_compressed(memory, batch, d, tokens.device());
  if (memory.key_mask.defined()) {
    TXL_CHECK(memory.key_mask.dim() == 2 && memory.key_mask.size(0) == batch &&
                  memory.key_mask.size(1) == m_len && memory.key_mask.scalar_type() == torch::kBool,
              "model memory: key_mask must be bool [B = ", batch, ", M = ", m_len, "], got ",
              memory.key_mask.sizes(), " ", memory.key_mask.scalar_type());
  }
}

namespace {

// Recurrent memory tokens: the visibility `allowed` [B', Q, M + Q] of concat(memory, segment)
// widened to queries concat(read, segment, written) and keys concat(memory, read, segment,
// written), m tokens each, as [B, Q + 2m, M + Q + 2m]: the segment's queries keep `allowed` and
// see every token read; the tokens read and written see the real memory and every key before
// them (causal over the whole row). key_mask bool [B, M + Q] (undefined = all real).
torch::Tensor with_memory_tokens(const torch::Tensor& allowed, const torch::Tensor& key_mask,
                                 int64_t q_len, int64_t m_len, int64_t m, torch::Device device) {
  const int64_t batch = key_mask.defined() ? key_mask.size(0) : allowed.size(0);
  const auto bool_opts = torch::dtype(torch::kBool).device(device);
  const auto keys =
      key_mask.defined() ? key_mask : torch::ones({batch, m_len + q_len}, bool_opts);  // [B, M + Q]
  const auto tokens = torch::ones({batch, m}, bool_opts);                              // [B, m]
  const auto all_keys =
      torch::cat({keys.narrow(1, 0, m_len), tokens, keys.narrow(1, m_len, q_len), tokens},
                 1);  // [B, M + Q + 2m]
  const auto causal = ops::attention_mask(q_len + 2 * m, m_len, 0, all_keys, {}, device);
  const auto segment = allowed.expand({batch, q_len, m_len + q_len});  // [B, Q, M + Q]
  const auto segment_rows =
      torch::cat({segment.narrow(2, 0, m_len), torch::ones({batch, q_len, m}, bool_opts),
                  segment.narrow(2, m_len, q_len), torch::zeros({batch, q_len, m}, bool_opts)},
                 2);  // [B, Q, M + Q + 2m]
  return torch::cat({causal.narrow(1, 0, m), segment_rows, causal.narrow(1, m + q_len, m)},
                    1);  // [B, Q + 2m, M + Q + 2m]
}

}  // namespace

modules::AttentionInputs TransformerLMImpl::segment_inputs(
    int64_t q_len, int64_t m_len, const torch::Tensor& key_mask, const Lookback& ctx,
    torch::ScalarType dtype, torch::Device device, const torch::Tensor& compressed_keys) {
  const int64_t n_len = compressed_keys.defined() ? compressed_keys.size(1) : 0;
  const int64_t m = config_.mem_tokens;
  const int64_t rows = q_len + 2 * m;  // queries: the memory tokens read and written too
  const int64_t k_len = n_len + m_len + rows;
  // same_length (paper code): each query sees the mem_len most recent keys. With mem_len 0
  // there is no history to equalise and the flag has no effect.
  const int64_t window = ctx.same_length && ctx.mem_len > 0 ? ctx.mem_len : 0;
  modules::AttentionInputs in;
  auto allowed = ops::attention_mask(q_len, m_len, window, key_mask, ctx.extra_mask, device);
  if (m > 0) allowed = with_memory_tokens(allowed, key_mask, q_len, m_len, m, device);
  if (n_len > 0) {  // the compressed rows come first, visible to every query where real
    const int64_t batch = compressed_keys.size(0);
    allowed = torch::cat({compressed_keys.unsqueeze(1).expand({batch, rows, n_len}),
                          allowed.expand({batch, rows, m_len + rows})},
                         2);  // [B, Q + 2m, K]
  }
  in.blocked = allowed.logical_not().unsqueeze(0);     // [1, B, Q, K]
  in.score_bias = ops::score_bias(in.blocked, dtype);  // [1, B, Q, K]
  in.positions =
      scheme_->inputs(attention_.position_shape(), rows, k_len, ctx.clamp_len, dtype, device);
  if (positions_) positions_->complete(in.positions, &drop);
  return in;
}

LMOutput TransformerLMImpl::forward(const Inputs& in, const Memory& given, const Lookback& ctx,
                                    bool want_logits, std::vector<torch::Tensor>* attention) {
  check_inputs(in, given, ctx);
  const auto& [tokens, targets, input_mask, given_reset] = in;
  const int64_t batch = tokens.size(0), q_len = tokens.size(1), d = config_.d_model;
  const auto device = tokens.device();
  // With zero_memory the reset rows restart from zeros (inside zero_started), not from nothing.
  const bool zero_start = ctx.zero_memory && ctx.mem_len > 0;
  const Memory memory = zero_start ? zero_started(given, given_reset, batch, ctx,
                                                  word_emb->table(0).options().device(device))
                                   : given;
  const torch::Tensor reset = zero_start ? torch::Tensor() : given_reset;
  const int64_t m_len = memory.length();

  const auto [key_mask, compressed_keys] =
      real_keys(memory, reset, input_mask, batch, q_len, device);
  const int64_t n_len = memory.compressed_length();

  // Vanilla: positions within the segment, added once to the embedding.
  auto x = with_positions(word_emb(tokens),
                          torch::arange(q_len, torch::dtype(torch::kLong).device(device)));
  x = drop(x);  // [B, Q, d]
  const int64_t n_tok = config_.mem_tokens;
  if (n_tok > 0) x = torch::cat({read_tokens(given, given_reset, x), x, write_tokens(x)}, 1);
  auto inputs =
      segment_inputs(q_len, m_len, key_mask, ctx, x.scalar_type(), device, compressed_keys);

  std::vector<torch::Tensor> hiddens;  // the input of every layer: the next memory
  hiddens.reserve(layer_list_.size());
  std::vector<torch::Tensor> kv;  // with cache_kv: every layer's keys and values [2, H, B, K, D]
  for (size_t l = 0; l < layer_list_.size(); ++l) {
    hiddens.push_back(n_tok > 0 ? x.narrow(1, n_tok, q_len) : x);  // the segment's rows
    // The dtype of each layer's input is fixed by the model (and autocast): memory made by the
    // same model matches it; anything else was made under other settings.
    // Zero memory is made in the weights' dtype: under autocast a layer's input may differ.
    auto mem_l = m_len == 0   ? torch::Tensor()
                 : zero_start ? memory.layers[l].to(x.scalar_type())
                              : memory.layers[l];  // [B, M, d]
    TXL_CHECK(m_len == 0 || mem_l.scalar_type() == x.scalar_type(), "model memory: layer ", l,
              " is ", memory.layers[l].scalar_type(), " but the layer input is ", x.scalar_type(),
              " (memory made before the model was converted, or under other "
              "autocast settings?)");
    if (n_len > 0) {
      mem_l =
          torch::cat({memory.compressed[l].to(mem_l.scalar_type()), mem_l}, 1);  // [B, N + M, d]
    }
    modules::KeyValueCache cache;
    if (ctx.cache_kv && m_len > 0 && !memory.kv.empty()) cache.memory = memory.kv[l];
    torch::Tensor weights;
    x = layer_list_[l](x, mem_l, inputs, attention != nullptr ? &weights : nullptr,
                       ctx.cache_kv ? &cache : nullptr);      // [B, Q, d]
    if (attention != nullptr) attention->push_back(weights);  // [B, H, Q, K]
    if (ctx.cache_kv) kv.push_back(cache.all);
  }
  if (final_norm) x = final_norm(x);
  torch::Tensor written;  // [B, m, d]: what the last layer made of the tokens written
  if (n_tok > 0) {
    written = x.narrow(1, n_tok + q_len, n_tok);
    x = x.narrow(1, n_tok, q_len);  // [B, Q, d]
  }
  x = drop(x);

  LMOutput out;
  out.memory =
      update_memory(memory, hiddens, kv, key_mask, compressed_keys, q_len, ctx, &out.aux_loss);
  if (written.defined()) out.memory.tokens = ctx.memory_grad ? written : written.detach();
  out.hidden = x;
  auto flat = x.reshape({batch * q_len, d});  // [B Q, d]
  if (targets.defined()) out.nll = crit->nll(flat, targets.reshape({-1})).view({batch, q_len});
  if (want_logits) out.logits = crit->log_prob(flat).view({batch, q_len, n_token_});
  return out;
}

torch::Tensor TransformerLMImpl::with_positions(const torch::Tensor& x,
                                                const torch::Tensor& positions) const {
  return positions_ ? positions_->embed(x, positions) : x;
}

LMStep TransformerLMImpl::prepare_step(int64_t capacity, int64_t clamp_len, bool zero_memory) {
  torch::NoGradGuard no_grad;
  LMStep w;
  // The scheme's inputs for one query over the C slots, shared by every layer.
  const auto& like = layer_list_.front()->attn->qkv->weight;
  auto slots = scheme_->inputs(attention_.position_shape(), 1, capacity, clamp_len,
                               like.scalar_type(), like.device());
  if (positions_) positions_->complete(slots, nullptr);
  for (auto& layer : layer_list_) {
    w.layers.push_back(layer->prepare_step(slots, clamp_len, zero_memory));
  }
  w.softmax = crit->prepare_step();
  // One block of 2 MB pages for every panel a generated token streams.
  std::vector<ops::Projection*> streamed;
  for (auto& l : w.layers) {
    for (auto* p : {&l.attn.qkv, &l.attn.out, &l.ff.fc1, &l.ff.fc2}) streamed.push_back(p);
  }
  streamed.push_back(&w.softmax.words);
  ops::share_pages(streamed);
  return w;
}

torch::Tensor TransformerLMImpl::step(const LMStep& weights, const torch::Tensor& tokens,
                                      const torch::Tensor& positions,
                                      const std::vector<torch::Tensor>& kv, int64_t used,
                                      const modules::StepMask& mask) {
  auto x = with_positions(word_emb->step(tokens), positions);  // [B, q, d]
  for (size_t l = 0; l < layer_list_.size(); ++l) {
    x = layer_list_[l]->step(weights.layers[l], x, kv[l], used, mask, positions);  // [B, q, d]
  }
  auto last = x.select(1, x.size(1) - 1);       // [B, d]
  return final_norm ? final_norm(last) : last;  // [B, d]
}

torch::Tensor TransformerLMImpl::step_log_prob(const modules::SoftmaxStep& softmax,
                                               const torch::Tensor& hidden) {
  return crit->step_log_prob(softmax, hidden);  // [B, V]
}

void TransformerLMImpl::write_zero_memory(const LMStep& weights,
                                          const std::vector<torch::Tensor>& kv, int64_t n) const {
  for (size_t l = 0; l < kv.size(); ++l) {
    modules::MultiHeadAttentionImpl::write_zero_memory(weights.layers[l].attn,
                                                       kv[l].narrow(3, 0, n));
  }
}

}  // namespace txl::models
