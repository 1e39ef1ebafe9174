// Transformer-XL's memory of positions (paper 3.2, docs/model.md section 3): every layer's input at
// the last mem_len positions, read before the next segment's, without gradient. Every model has
// it; it does nothing while Lookback::mem_len is 0. Its part is Memory::layers with
// Memory::key_mask (and Memory::kv, the cached keys and values, never saved).
#include <algorithm>
#include <optional>

#include "txl/models/memory_mechanism.h"
#include "txl/models/transformer_lm.h"
#include "txl/util/error.h"

namespace txl::models::memory {

namespace {

class XlCache final : public MechanismPart {
 public:
  XlCache(int64_t n_layer, int64_t d_model) : n_layer_(n_layer), d_model_(d_model) {}

  void check(const Memory& memory, int64_t batch, const Lookback& ctx,
             const torch::Device& device) const override {
    if (memory.layers.empty()) return;
    TXL_CHECK(static_cast<int64_t>(memory.layers.size()) == n_layer_, "model memory: has ",
              memory.layers.size(), " layers, the model has n_layer = ", n_layer_,
              " (memory from another model?)");
    const int64_t m_len = memory.length();
    for (size_t l = 0; l < memory.layers.size(); ++l) {
      const auto& m = memory.layers[l];
      TXL_CHECK(m.defined() && m.dim() == 3 && m.size(0) == batch && m.size(1) == m_len &&
                    m.size(2) == d_model_,
                "model memory: layer ", l, " must be [B = ", batch, ", M = ", m_len,
                ", d = ", d_model_, "], got ", m.defined() ? m.sizes() : torch::IntArrayRef{},
                " (batch size or model width changed since the memory was made?)");
      TXL_CHECK(m.device() == device, "model memory: layer ", l, " is on ", m.device(),
                ", the tokens on ", device, " (memory made before the model was moved?)");
      TXL_CHECK(ctx.memory_grad || !m.requires_grad(), "model memory: layer ", l,
                " requires grad; memory must be detached (stop-gradient, paper 3.2) unless "
                "the context says memory_grad");
    }
    const auto& mask = memory.key_mask;
    if (mask.defined()) {
      TXL_CHECK(mask.dim() == 2 && mask.size(0) == batch && mask.size(1) == m_len &&
                    mask.scalar_type() == torch::kBool,
                "model memory: key_mask must be bool [B = ", batch, ", M = ", m_len, "], got ",
                mask.sizes(), " ", mask.scalar_type());
    }
  }

  // With Lookback::zero_memory the layers read zeros where there is no memory yet, and a reset
  // row's zeros again (not nothing); which keys of concat(memory, segment) are real.
  void start(Segment& s) const override {
    const Lookback& ctx = *s.ctx;
    const bool zero_start = ctx.zero_memory && ctx.mem_len > 0;
    s.memory = zero_start ? zero_started(*s.given, s.reset, s.batch, ctx, s.options) : *s.given;
    s.key_mask = real_keys(s.memory, zero_start ? torch::Tensor() : s.reset, s.input_mask, s.batch,
                           s.q_len, s.options.device());
  }

  torch::Tensor layer_memory(const Segment& s, size_t l, const torch::Tensor& /*rows*/,
                             torch::ScalarType dtype) const override {
    if (s.memory.length() == 0) return {};  // no memory rows: the layer reads the segment
    // The dtype of each layer's input is fixed by the model (and autocast): memory made by the
    // same model matches it; anything else was made under other settings. Zero memory is made
    // in the weights' dtype: under autocast a layer's input may differ.
    const auto& layer = s.memory.layers[l];  // [B, M, d]
    const bool zero_start = s.ctx->zero_memory && s.ctx->mem_len > 0;
    const auto rows = zero_start ? layer.to(dtype) : layer;
    TXL_CHECK(rows.scalar_type() == dtype, "model memory: layer ", l, " is ", layer.scalar_type(),
              " but the layer input is ", dtype,
              " (memory made before the model was converted, or under other "
              "autocast settings?)");
    return rows;
  }

  // The last mem_len positions of concat(memory, segment) (paper code: ending ext_len positions
  // before the segment's end); positions leave in whole groups of segment.group.
  void write(Segment& s, Memory& next, torch::Tensor* /*aux_loss*/) const override;

 private:
  Memory zero_started(const Memory& memory, const torch::Tensor& reset, int64_t batch,
                      const Lookback& ctx, const torch::TensorOptions& options) const;
  static torch::Tensor real_keys(const Memory& memory, const torch::Tensor& reset,
                                 const torch::Tensor& input_mask, int64_t batch, int64_t q_len,
                                 torch::Device device);

  int64_t n_layer_, d_model_;
};

void XlCache::write(Segment& s, Memory& next, torch::Tensor* /*aux_loss*/) const {
  const Lookback& ctx = *s.ctx;
  if (ctx.mem_len == 0) return;
  const int64_t m_len = s.memory.length(), q_len = s.q_len;
  const int64_t end = m_len + std::max<int64_t>(0, q_len - ctx.ext_len);
  int64_t begin = std::max<int64_t>(0, end - ctx.mem_len);
  begin -= begin % s.group;
  const int64_t length = end - begin;
  {
    // Paper 3.2: the memory takes no part in the backward pass (stop-gradient), unless the
    // caller back-propagates through segments (Lookback::memory_grad).
    std::optional<torch::NoGradGuard> no_grad;
    if (!ctx.memory_grad) no_grad.emplace();
    for (size_t l = 0; l < s.hiddens.size(); ++l) {
      const auto& hidden = s.hiddens[l];  // [B, Q, d]
      torch::Tensor kept;                 // [B, length, d]
      if (begin >= m_len) {
        kept = hidden.narrow(1, begin - m_len, length);  // a view: no copy
      } else {
        kept = torch::cat(
            {s.memory.layers[l].narrow(1, begin, m_len - begin), hidden.narrow(1, 0, end - m_len)},
            1);
      }
      next.layers.push_back(ctx.memory_grad ? kept : kept.detach());
      // Keys and values cover every position of concat(memory, segment): the same window.
      if (!s.kv.empty()) next.kv.push_back(s.kv[l].narrow(3, begin, length));  // [2, H, B, n, D]
    }
  }
  next.key_mask = s.key_mask.narrow(1, begin, length);  // [B, length]
  s.evicted = begin;
}

Memory XlCache::zero_started(const Memory& memory, const torch::Tensor& reset, int64_t batch,
                             const Lookback& ctx, const torch::TensorOptions& options) const {
  if (memory.layers.empty()) {
    Memory zeros;
    for (int64_t l = 0; l < n_layer_; ++l) {
      zeros.layers.push_back(torch::zeros({batch, ctx.mem_len, d_model_}, options));  // [B, M, d]
    }
    zeros.key_mask = torch::ones({batch, ctx.mem_len}, options.dtype(torch::kBool));  // [B, M]
    return zeros;
  }
  if (!reset.defined() || !reset.any().item<bool>()) return memory;
  Memory restarted;  // the reset rows start from zeros again, all of them visible
  const auto rows = on_device(reset, options.device());  // [B]
  for (const auto& layer : memory.layers) {
    restarted.layers.push_back(layer.masked_fill(rows.view({-1, 1, 1}), 0));  // [B, M, d]
  }
  const auto keys = memory.key_mask.defined() ? on_device(memory.key_mask, options.device())
                                              : torch::ones({batch, memory.length()},
                                                            options.dtype(torch::kBool));  // [B, M]
  restarted.key_mask = keys.logical_or(rows.unsqueeze(1));                                 // [B, M]
  return restarted;  // without cached keys and values: the zeroed rows' are projected anew
}

torch::Tensor XlCache::real_keys(const Memory& memory, const torch::Tensor& reset,
                                 const torch::Tensor& input_mask, int64_t batch, int64_t q_len,
                                 torch::Device device) {
  const int64_t m_len = memory.length();
  auto bool_opts = torch::dtype(torch::kBool).device(device);
  auto memory_keys = m_len == 0                  ? torch::empty({batch, 0}, bool_opts)
                     : memory.key_mask.defined() ? on_device(memory.key_mask, device)
                                                 : torch::ones({batch, m_len}, bool_opts);
  if (reset.defined() && m_len > 0) {
    memory_keys = memory_keys.logical_and(on_device(reset, device).logical_not().unsqueeze(1));
  }
  auto segment_keys = input_mask.defined() ? input_mask : torch::ones({batch, q_len}, bool_opts);
  return torch::cat({memory_keys, segment_keys}, 1);  // [B, M + Q]
}

class XlCacheMechanism final : public MemoryMechanism {
 public:
  std::string_view name() const override { return "xl_cache"; }
  const PartLayout& layout() const override {
    static const PartLayout kLayout{"layer", true,     "key_mask", false,
                                    false,   "memory", "M",        "model.mem_len"};
    return kLayout;
  }
  MechanismTraits traits() const override { return {}; }
  int64_t state_rows(const config::ModelConfig& config, int64_t mem_len) const override {
    return config.n_layer * mem_len;
  }
  bool used_by(const config::ModelConfig& /*config*/) const override { return true; }
  void check(const config::ModelConfig& config,
             const modules::PositionScheme& /*scheme*/) const override {
    TXL_CHECK(config.mem_len >= 0, "model.mem_len = ", config.mem_len, " must be >= 0");
    TXL_CHECK(config.ext_len >= 0, "model.ext_len = ", config.ext_len, " must be >= 0");
  }
  std::unique_ptr<MechanismPart> for_model(TransformerLMImpl& /*model*/,
                                           const config::ModelConfig& config,
                                           const modules::InitOptions& /*init*/) const override {
    return std::make_unique<XlCache>(config.n_layer, config.d_model);
  }
};

}  // namespace

const MemoryMechanism& xl_cache() {
  static const XlCacheMechanism kMechanism;
  return kMechanism;
}

}  // namespace txl::models::memory
