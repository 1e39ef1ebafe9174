#include "txl/models/transformer_lm.h"

#include <algorithm>
#include <numeric>

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
  for (const auto* mechanism : memory_mechanisms()) {
    if (mechanism->used_by(config)) mechanism->check(config, scheme);
  }
  TXL_CHECK(config.clamp_len >= -1, "model.clamp_len = ", config.clamp_len,
            " must be -1 (no clamp) or >= 0");
  check_clamp(scheme, config.clamp_len, "model.clamp_len");
  const bool absolute = scheme.traits().absolute;
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
  attention_.positions.settings = config::position_settings(config);
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
  for (const auto* mechanism : models::memory_mechanisms()) {  // the registry
    if (!mechanism->used_by(config)) continue;
    mechanisms_.push_back(mechanism);
    mechanism_parts_.push_back(mechanism->for_model(*this, config, init));
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

bool TransformerLMImpl::can_cache_kv() const {
  if (!scheme_->traits().caches_memory_kv) return false;
  return std::all_of(mechanisms_.begin(), mechanisms_.end(),
                     [](const auto* m) { return m->traits().caches_kv; });
}

bool TransformerLMImpl::decodes_by_step(int64_t mem_len) const {
  return std::all_of(mechanism_parts_.begin(), mechanism_parts_.end(),
                     [&](const auto& part) { return part->steps(mem_len); });
}

void TransformerLMImpl::check_cache_kv(const Memory& memory) const {
  TXL_CHECK(scheme_->traits().caches_memory_kv, "model context: cache_kv with attn_type ",
            config_.attn_type,
            ", whose layers add positions to the memory's keys anew every "
            "segment");
  for (const auto* mechanism : mechanisms_) {
    TXL_CHECK(mechanism->traits().caches_kv, "model context: cache_kv with the memory mechanism ",
              mechanism->name(), ", whose keys the cache does not hold");
  }
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
  if (scheme_->traits().absolute) {
    TXL_CHECK((ctx.mem_len == 0 && memory.empty()) || config_.allow_abs_with_memory,
              "model context: attn_type ", config_.attn_type, " with mem_len = ", ctx.mem_len,
              " (memory of ", memory.length(),
              " positions): absolute positions need mem_len 0 unless "
              "model.allow_abs_with_memory is set");
  }
  if (ctx.cache_kv) check_cache_kv(memory);
  for (const auto& [name, part] : memory.parts) {
    const auto mine = std::find_if(mechanisms_.begin(), mechanisms_.end(),
                                   [&](const auto* m) { return m->layout().name == name; });
    if (mine != mechanisms_.end()) continue;
    const auto& all = models::memory_mechanisms();
    const auto known = std::find_if(all.begin(), all.end(),
                                    [&](const auto* m) { return m->layout().name == name; });
    TXL_CHECK(known == all.end(), "model memory: holds ", (*known)->layout().what,
              " but the model has ", (*known)->layout().setting, " 0");
    TXL_FAIL("model memory: holds a part '", name, "' of no memory mechanism");
  }
  for (const auto& part : mechanism_parts_) part->check(memory, batch, ctx, tokens.device());
}

torch::Tensor TransformerLMImpl::segment_visibility(int64_t q_len, int64_t m_len,
                                                    const torch::Tensor& key_mask,
                                                    const Lookback& ctx, torch::Device device,
                                                    const torch::Tensor& prefix_keys) const {
  const int64_t n_len = prefix_keys.defined() ? prefix_keys.size(1) : 0;
  // same_length (paper code): each query sees the mem_len most recent keys. With mem_len 0
  // there is no history to equalise and the flag has no effect.
  const int64_t window = ctx.same_length && ctx.mem_len > 0 ? ctx.mem_len : 0;
  auto allowed = ops::attention_mask(q_len, m_len, window, key_mask, ctx.extra_mask, device);
  for (const auto& part : mechanism_parts_) {
    allowed = part->visibility(allowed, key_mask, q_len, m_len, device);
  }
  if (n_len == 0) return allowed;
  // The prefix comes first, visible to every query where real.
  const int64_t batch = prefix_keys.size(0), rows = allowed.size(-2);
  return torch::cat({prefix_keys.unsqueeze(1).expand({batch, rows, n_len}),
                     allowed.expand({batch, rows, allowed.size(-1)})},
                    2);  // [B, Q', K]
}

modules::AttentionInputs TransformerLMImpl::segment_inputs(
    int64_t q_len, int64_t m_len, const torch::Tensor& key_mask, const Lookback& ctx,
    torch::ScalarType dtype, torch::Device device, const torch::Tensor& prefix_keys) {
  const auto allowed = segment_visibility(q_len, m_len, key_mask, ctx, device, prefix_keys);
  modules::AttentionInputs in;
  in.blocked = allowed.logical_not().unsqueeze(0);     // [1, B, Q', K]
  in.score_bias = ops::score_bias(in.blocked, dtype);  // [1, B, Q', K]
  in.positions = scheme_->inputs(attention_.position_shape(), allowed.size(-2), allowed.size(-1),
                                 ctx.clamp_len, dtype, device);
  if (positions_) positions_->complete(in.positions, &drop);
  return in;
}

Segment TransformerLMImpl::open_segment(const Memory& given, const Lookback& ctx, int64_t batch,
                                        int64_t q_len, const torch::Tensor& reset,
                                        const torch::Tensor& input_mask, torch::Device device) {
  Segment segment;
  segment.batch = batch;
  segment.q_len = q_len;
  segment.ctx = &ctx;
  segment.given = &given;
  segment.reset = reset;
  segment.input_mask = input_mask;
  segment.options = word_emb->table(0).options().device(device);
  segment.layers = &layer_list_;
  segment.training = is_training();
  for (const auto& part : mechanism_parts_) part->start(segment);
  return segment;
}

LMOutput TransformerLMImpl::forward(const Inputs& in, const Memory& given, const Lookback& ctx,
                                    bool want_logits, std::vector<torch::Tensor>* attention) {
  check_inputs(in, given, ctx);
  const auto& tokens = in.tokens;
  const int64_t batch = tokens.size(0), q_len = tokens.size(1), d = config_.d_model;
  const auto device = tokens.device();
  auto segment = open_segment(given, ctx, batch, q_len, in.reset, in.input_mask, device);

  // Vanilla: positions within the segment, added once to the embedding.
  auto x = with_positions(word_emb(tokens),
                          torch::arange(q_len, torch::dtype(torch::kLong).device(device)));
  x = drop(x);  // [B, Q, d]
  for (const auto& part : mechanism_parts_) x = part->surround(x, segment);
  const auto inputs = segment_inputs(q_len, segment.memory.length(), segment.key_mask, ctx,
                                     x.scalar_type(), device, segment.prefix_keys);
  x = run_layers(x, segment, inputs, attention);  // [B, before + Q + after, d]
  if (final_norm) x = final_norm(x);
  LMOutput out;
  for (const auto& part : mechanism_parts_) x = part->finish(x, segment, out.memory);
  x = drop(x);  // [B, Q, d]

  for (const auto& part : mechanism_parts_) {
    segment.group = std::lcm(segment.group, part->eviction_group(ctx));
  }
  for (const auto& part : mechanism_parts_) part->write(segment, out.memory, &out.aux_loss);
  out.hidden = x;
  auto flat = x.reshape({batch * q_len, d});  // [B Q, d]
  if (in.targets.defined()) {
    out.nll = crit->nll(flat, in.targets.reshape({-1})).view({batch, q_len});
  }
  if (want_logits) out.logits = crit->log_prob(flat).view({batch, q_len, n_token_});
  return out;
}

torch::Tensor TransformerLMImpl::run_layers(torch::Tensor x, Segment& segment,
                                            const modules::AttentionInputs& inputs,
                                            std::vector<torch::Tensor>* attention) {
  const Lookback& ctx = *segment.ctx;
  const auto& memory = segment.memory;
  const bool around = segment.before + segment.after > 0;
  segment.hiddens.reserve(layer_list_.size());
  for (size_t l = 0; l < layer_list_.size(); ++l) {
    // The input of every layer at the segment's rows: the next memory.
    segment.hiddens.push_back(around ? x.narrow(1, segment.before, segment.q_len) : x);
    torch::Tensor rows;  // [B, N + M, d]: what the mechanisms put before the segment
    for (const auto& part : mechanism_parts_) {
      rows = part->layer_memory(segment, l, rows, x.scalar_type());
    }
    modules::KeyValueCache cache;
    if (ctx.cache_kv && memory.length() > 0 && !memory.kv.empty()) cache.memory = memory.kv[l];
    torch::Tensor weights;
    auto context = layer_context(segment, l);
    modules::AttentionInputs own;  // the layer's own inputs, when it reads more than its keys
    if (context) {
      own = inputs;
      own.context = std::move(context);
    }
    x = layer_list_[l](x, rows, own.context ? own : inputs,
                       attention != nullptr ? &weights : nullptr,
                       ctx.cache_kv ? &cache : nullptr);      // [B, Q', d]
    if (attention != nullptr) attention->push_back(weights);  // [B, H, Q', K]
    if (ctx.cache_kv) segment.kv.push_back(cache.all);
  }
  return x;
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
                                      const modules::StepMask& mask,
                                      const std::vector<modules::ContextHook>& contexts) {
  auto x = with_positions(word_emb->step(tokens), positions);        // [B, q, d]
  x = step_layers(weights, x, kv, used, mask, positions, contexts);  // [B, q, d]
  auto last = x.select(1, x.size(1) - 1);                            // [B, d]
  return final_norm ? final_norm(last) : last;                       // [B, d]
}

torch::Tensor TransformerLMImpl::step_layers(const LMStep& weights, torch::Tensor x,
                                             const std::vector<torch::Tensor>& kv, int64_t used,
                                             const modules::StepMask& mask,
                                             const torch::Tensor& positions,
                                             const std::vector<modules::ContextHook>& contexts) {
  for (size_t l = 0; l < layer_list_.size(); ++l) {
    if (l < contexts.size() && contexts[l]) {
      auto own = mask;
      own.context = contexts[l];
      x = layer_list_[l]->step(weights.layers[l], x, kv[l], used, own, positions);  // [B, q, d]
      continue;
    }
    x = layer_list_[l]->step(weights.layers[l], x, kv[l], used, mask, positions);  // [B, q, d]
  }
  return x;
}

modules::ContextHook TransformerLMImpl::layer_context(const Segment& segment, size_t l) const {
  modules::ContextHook hook;
  for (const auto& part : mechanism_parts_) {
    auto next = part->context(segment, l);
    if (!next) continue;
    hook = !hook
               ? next
               : modules::ContextHook([hook, next](const torch::Tensor& q, const torch::Tensor& c) {
                   return next(q, hook(q, c));
                 });
  }
  return hook;
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
