// Compressive memory (Rae et al. 2020; docs/model.md), model.cmem_len > 0: positions leave the
// memory of positions cmem_rate at a time, each layer's compressor (Compressor, below) turns
// every group into one row of a compressed memory of cmem_len rows, and attention reads
// concat(compressed memory, memory, segment), positions counted over that whole sequence as
// over one longer memory. A conv compressor trains by the attention-reconstruction loss alone.
// Its part: "compressed", L tensors [B, N, d], always detached, with a mask [B, N].
#include "txl/models/memory/compressive.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "txl/config/config.h"
#include "txl/models/memory_mechanism.h"
#include "txl/models/transformer_lm.h"
#include "txl/util/error.h"

namespace txl::models::memory {

namespace {

// model.cmem_compress's value through its name table (config/enums.h).
std::optional<config::Compression> compression(const CompressorOptions& options) {
  return config::parse_enum<config::Compression>(options.kind);
}

}  // namespace

CompressorImpl::CompressorImpl(const CompressorOptions& options) : options_(options) {
  TXL_CHECK(options.rate >= 1, "model.cmem_rate = ", options.rate, " must be >= 1");
  TXL_CHECK(compression(options).has_value(), "model.cmem_compress: unknown value \"", options.kind,
            "\" (allowed: conv, mean, max)");
  if (compression(options) != config::Compression::kConv) return;
  const int64_t d = options.d_model, c = options.rate;
  conv = register_module("conv",
                         torch::nn::Conv1d(torch::nn::Conv1dOptions(d, d, c).stride(c).bias(true)));
  // Mean pooling to start with: tap k of output channel o reads input channel o with 1/c.
  torch::NoGradGuard no_grad;
  conv->weight.copy_(torch::eye(d).unsqueeze(2).expand({d, d, c}) / static_cast<double>(c));
  conv->bias.zero_();
}

std::pair<torch::Tensor, torch::Tensor> CompressorImpl::forward(const torch::Tensor& rows,
                                                                const torch::Tensor& mask) {
  const int64_t batch = rows.size(0), n = rows.size(1), d = rows.size(2), c = options_.rate;
  TXL_CHECK(n % c == 0, "compressive memory: ", n, " rows do not make whole groups of ", c);
  const int64_t groups = n / c;
  const auto real = mask.view({batch, groups, c});                           // [B, G, c]
  const auto group_mask = real.any(2);                                       // [B, G]
  const auto zeroed = rows.masked_fill(mask.logical_not().unsqueeze(2), 0);  // [B, G c, d]
  if (trains()) {
    auto out = conv(zeroed.transpose(1, 2)).transpose(1, 2);  // [B, d, G c] -> [B, G, d]
    return {out, group_mask};
  }
  const auto grouped = zeroed.view({batch, groups, c, d});  // [B, G, c, d]
  if (compression(options_) == config::Compression::kMean) {
    const auto count = real.sum(2, /*keepdim=*/true).clamp_min(1).to(rows.scalar_type());
    return {grouped.sum(2) / count, group_mask};  // [B, G, d]
  }
  const auto lowest = -std::numeric_limits<float>::infinity();
  const auto maxed = grouped.masked_fill(real.logical_not().unsqueeze(3), lowest).amax(2);
  return {maxed.masked_fill(group_mask.logical_not().unsqueeze(2), 0), group_mask};  // [B, G, d]
}

const MemoryMechanism& compressive();

namespace {

constexpr const char* kCompressed = "compressed";

class Compressive final : public MechanismPart {
 public:
  Compressive(TransformerLMImpl& model, const config::ModelConfig& config)
      : rate_(config.cmem_rate), length_(config.cmem_len), loss_weight_(config.cmem_loss_weight) {
    auto list = model.register_module("compressors", torch::nn::ModuleList());
    for (int i = 0; i < config.n_layer; ++i) {
      compressors_.emplace_back(CompressorOptions{config.d_model, config.cmem_rate,
                                                  config::to_string(config.cmem_compress)});
      list->push_back(compressors_.back());
    }
  }

  // The compressed memory's rows: [B, N, d] per layer, detached, on the tokens' device, with a
  // bool [B, N] mask.
  void check(const Memory& memory, int64_t batch, const Lookback& /*ctx*/,
             const torch::Device& device) const override {
    if (!memory.has(kCompressed)) return;
    const auto& part = memory.part(kCompressed);
    check_part(part, compressive().layout(),
               {memory.layers.size(), batch, part.length(), -1,
                compressors_.front()->options().d_model, false},
               device);
  }

  // The compressed rows are keys before the memory, visible to every query where real; a reset
  // row's are forgotten (hidden, not zeroed into view).
  void start(Segment& s) const override {
    const auto& part = s.given->part(kCompressed);
    if (part.length() == 0) return;
    auto keys = on_device(part.mask, s.options.device());  // [B, N]
    if (s.reset.defined()) {
      keys = keys.logical_and(on_device(s.reset, s.options.device()).logical_not().unsqueeze(1));
    }
    s.prefix_keys = keys;
  }

  torch::Tensor layer_memory(const Segment& s, size_t l, const torch::Tensor& rows,
                             torch::ScalarType dtype) const override {
    const auto& part = s.given->part(kCompressed);
    if (part.length() == 0) return rows;
    if (!rows.defined()) return part.layers[l].to(dtype);                 // [B, N, d]
    return torch::cat({part.layers[l].to(rows.scalar_type()), rows}, 1);  // [B, N + M, d]
  }

  void write(Segment& s, Memory& next, torch::Tensor* aux_loss) const override;

  int64_t eviction_group(const Lookback& ctx) const override { return ctx.mem_len > 0 ? rate_ : 1; }
  bool steps(int64_t mem_len) const override { return mem_len == 0; }

 private:
  // The rows that left, positions [0, evicted) of layer l's concat(memory, segment), as
  // constants [B, E, d].
  static torch::Tensor evicted_rows(const Segment& s, size_t l) {
    const int64_t evicted = s.evicted, m_len = s.memory.length();
    const auto& hidden = s.hiddens[l];
    if (evicted <= m_len) return s.memory.layers[l].narrow(1, 0, evicted).detach();
    if (m_len == 0) return hidden.narrow(1, 0, evicted).detach();  // rows of the segment leave
    return torch::cat({s.memory.layers[l], hidden.narrow(1, 0, evicted - m_len)}, 1).detach();
  }

  int64_t rate_, length_;  // model.cmem_rate, model.cmem_len
  double loss_weight_;
  mutable std::vector<Compressor> compressors_;  // handles: their modules train
};

// Compresses positions [0, evicted) of every layer's concat(memory, segment) into `next`'s
// compressed memory (after the given one's, the last model.cmem_len rows kept) and, in training,
// sets *aux_loss to the layers' mean reconstruction loss times its weight.
void Compressive::write(Segment& s, Memory& next, torch::Tensor* aux_loss) const {
  const Lookback& ctx = *s.ctx;
  if (ctx.mem_len == 0) return;
  const auto& given = s.given->part(kCompressed);
  const int64_t evicted = s.evicted, n_len = given.length();
  const int64_t m_len = s.memory.length(), q_len = s.q_len;
  const bool with_loss = aux_loss != nullptr && s.training && torch::GradMode::is_enabled() &&
                         compressors_.front()->trains() && loss_weight_ > 0;
  if (evicted == 0 && n_len == 0) return;                      // nothing compressed yet
  const auto old_mask = s.key_mask.narrow(1, 0, evicted);      // [B, E]
  const auto query_mask = s.key_mask.narrow(1, m_len, q_len);  // [B, Q]
  torch::Tensor loss_sum, made_mask;  // made_mask [B, E / c]: the same in every layer
  MemoryPart out;
  for (size_t l = 0; l < s.hiddens.size(); ++l) {
    torch::Tensor rows = n_len > 0 ? given.layers[l] : torch::Tensor();  // [B, N, d]
    if (evicted > 0) {
      const auto old = evicted_rows(s, l);  // [B, E, d]
      std::optional<torch::NoGradGuard> no_grad;
      if (!with_loss) no_grad.emplace();
      auto [made, mask] = compressors_[l](old, old_mask);  // [B, E / c, d], [B, E / c]
      if (with_loss) {
        auto loss = (*s.layers)[l]->reconstruction_loss(s.hiddens[l], old, old_mask, made, mask,
                                                        query_mask);
        loss_sum = loss_sum.defined() ? loss_sum + loss : loss;
      }
      made = made.detach().to(s.hiddens[l].scalar_type());
      rows = rows.defined() ? torch::cat({rows.to(made.scalar_type()), made}, 1) : made;
      made_mask = mask;
    }
    const int64_t keep = std::min<int64_t>(length_, rows.size(1));
    out.layers.push_back(rows.narrow(1, rows.size(1) - keep, keep));  // [B, N', d]
  }
  const auto& keys = s.prefix_keys;
  const auto all_mask = !made_mask.defined() ? keys
                        : n_len > 0          ? torch::cat({keys, made_mask}, 1)
                                             : made_mask;  // [B, N + E / c]
  const int64_t keep = out.layers.front().size(1);
  out.mask = all_mask.narrow(1, all_mask.size(1) - keep, keep);  // [B, N']
  next.parts[kCompressed] = std::move(out);
  if (loss_sum.defined()) {
    *aux_loss = loss_sum * (loss_weight_ / static_cast<double>(s.hiddens.size()));
  }
}

class CompressiveMechanism final : public MemoryMechanism {
 public:
  std::string_view name() const override { return "compressive"; }
  const PartLayout& layout() const override {
    static const PartLayout kLayout{kCompressed,         true, "compressed_mask", true, true,
                                    "compressed memory", "N",  "model.cmem_len"};
    return kLayout;
  }
  MechanismTraits traits() const override {
    return {/*caches_kv=*/false, /*keys_at_distance=*/false};
  }
  // Its N rows are keys too, and a convolution compresses the rows leaving (a segment's worth at
  // steady state: c rows of d into d per c tokens); nothing without a memory to compress.
  int64_t keys(const config::ModelConfig& config, int64_t mem_len) const override {
    return mem_len > 0 ? config.cmem_len : 0;
  }
  double flops_per_token(const config::ModelConfig& config, int64_t mem_len) const override {
    return keys(config, mem_len) > 0 && config.cmem_compress == config::Compression::kConv
               ? 2.0 * config.d_model * config.d_model
               : 0.0;
  }
  int64_t state_rows(const config::ModelConfig& config, int64_t mem_len) const override {
    return config.n_layer * keys(config, mem_len);
  }
  bool used_by(const config::ModelConfig& config) const override { return config.cmem_len != 0; }
  void check(const config::ModelConfig& config,
             const modules::PositionScheme& scheme) const override {
    TXL_CHECK(config.cmem_len >= 0, "model.cmem_len = ", config.cmem_len, " must be >= 0");
    TXL_CHECK(config.mem_len > 0 && !scheme.traits().absolute, "model.cmem_len = ", config.cmem_len,
              ": compressive memory compresses what leaves the memory and needs mem_len > 0 and "
              "relative positions (",
              modules::memory_scheme_names(), ")");
  }
  std::unique_ptr<MechanismPart> for_model(TransformerLMImpl& model,
                                           const config::ModelConfig& config,
                                           const modules::InitOptions& /*init*/) const override {
    return std::make_unique<Compressive>(model, config);
  }
  // The same keys per query as xl: 3/4 of the memory kept, the rest compressed 4:1.
  std::vector<Example> examples() const override {
    return {{"compressive", "attn_type xl, mem_len 3/4, cmem_len 1/4 of it, cmem_rate 4 (conv)",
             [](config::ExperimentConfig& c) {
               c.model.attn_type = config::AttnType::kXl;
               c.model.cmem_len = c.model.mem_len / 4;
               c.model.mem_len -= c.model.cmem_len;
               c.model.cmem_rate = 4;
               c.model.cmem_compress = config::Compression::kConv;
             }}};
  }
};

}  // namespace

const MemoryMechanism& compressive() {
  static const CompressiveMechanism kMechanism;
  return kMechanism;
}

}  // namespace txl::models::memory
