// Recurrent memory tokens (Bulatov et al. 2022; docs/model.md), model.mem_tokens = m > 0: every
// layer runs over concat(m tokens read, segment, m tokens written), causally; the last layer's
// output at the tokens written is what the next segment reads. The memory of positions
// (mem_len) keeps the segment's rows only.
// Its part: "tokens", one tensor [B, m, d] for the whole model, detached unless the caller
// back-propagates through segments. Parameters memory_read_emb (added to the tokens read, alone
// at a stream's start or reset) and memory_write_emb (the tokens written), [m, d] each.
#include "txl/models/memory_mechanism.h"
#include "txl/models/transformer_lm.h"
#include "txl/modules/param_init.h"
#include "txl/ops/masks.h"
#include "txl/util/error.h"

namespace txl::models::memory {

const MemoryMechanism& memory_tokens();

namespace {

constexpr const char* kTokens = "tokens";

class MemoryTokens final : public MechanismPart {
 public:
  MemoryTokens(TransformerLMImpl& model, const config::ModelConfig& config,
               const modules::InitOptions& init)
      : m_(config.mem_tokens), d_(config.d_model) {
    read_emb_ = model.register_parameter("memory_read_emb", torch::empty({m_, d_}));
    write_emb_ = model.register_parameter("memory_write_emb", torch::empty({m_, d_}));
    modules::init_weight(read_emb_, init);
    modules::init_weight(write_emb_, init);
  }

  // One [B, m, d], detached unless the context back-propagates through memory.
  void check(const Memory& memory, int64_t batch, const Lookback& ctx,
             const torch::Device& device) const override {
    if (!memory.has(kTokens)) return;
    check_part(memory.part(kTokens), memory_tokens().layout(),
               {1, batch, m_, -1, d_, ctx.memory_grad}, device);
  }

  // The tokens read (memory_read_emb plus the memory's tokens, except in reset rows) before the
  // segment, those written (memory_write_emb) after it.
  torch::Tensor surround(const torch::Tensor& x, Segment& s) const override {
    const int64_t batch = x.size(0);
    auto read = read_emb_.to(x.scalar_type()).unsqueeze(0).expand({batch, m_, d_});  // [B, m, d]
    if (s.given->has(kTokens)) {
      auto carried = s.given->part(kTokens).layers.front().to(x.scalar_type());  // [B, m, d]
      if (s.reset.defined()) {
        carried = carried.masked_fill(on_device(s.reset, x.device()).view({-1, 1, 1}), 0);
      }
      read = read + carried;
    }
    const auto written = write_emb_.to(x.scalar_type()).unsqueeze(0).expand({batch, m_, d_});
    s.before += m_;
    s.after += m_;
    return torch::cat({read, x, written}, 1);  // [B, m + Q + m, d]
  }

  // The segment's queries keep `allowed` and see every token read; the tokens read and written
  // see the real memory and every key before them (causal over the whole row): queries
  // concat(read, segment, written), keys concat(memory, read, segment, written).
  torch::Tensor visibility(const torch::Tensor& allowed, const torch::Tensor& key_mask,
                           int64_t q_len, int64_t m_len, torch::Device device) const override {
    const int64_t batch = key_mask.defined() ? key_mask.size(0) : allowed.size(0), m = m_;
    const auto bool_opts = torch::dtype(torch::kBool).device(device);
    const auto keys = key_mask.defined()
                          ? key_mask
                          : torch::ones({batch, m_len + q_len}, bool_opts);  // [B, M + Q]
    const auto tokens = torch::ones({batch, m}, bool_opts);                  // [B, m]
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

  // What the last layer made of the tokens written is the next segment's to read.
  torch::Tensor finish(const torch::Tensor& x, const Segment& s, Memory& next) const override {
    const auto written = x.narrow(1, m_ + s.q_len, m_);  // [B, m, d]
    next.parts[kTokens].layers = {s.ctx->memory_grad ? written : written.detach()};
    return x.narrow(1, m_, s.q_len);  // [B, Q, d]
  }

  bool steps(int64_t /*mem_len*/) const override { return false; }

 private:
  int64_t m_, d_;
  torch::Tensor read_emb_, write_emb_;  // [m, d] each
};

class MemoryTokensMechanism final : public MemoryMechanism {
 public:
  std::string_view name() const override { return "memory_tokens"; }
  const PartLayout& layout() const override {
    static const PartLayout kLayout{kTokens, false,           "",  false,
                                    false,   "memory tokens", "m", "model.mem_tokens"};
    return kLayout;
  }
  MechanismTraits traits() const override {
    return {/*caches_kv=*/false, /*keys_at_distance=*/false};
  }
  // (The FLOPs of the 2m rows around the segment are not counted.)
  int64_t state_rows(const config::ModelConfig& config, int64_t /*mem_len*/) const override {
    return config.mem_tokens;
  }
  bool used_by(const config::ModelConfig& config) const override { return config.mem_tokens != 0; }
  void check(const config::ModelConfig& config,
             const modules::PositionScheme& scheme) const override {
    TXL_CHECK(config.mem_tokens >= 0, "model.mem_tokens = ", config.mem_tokens, " must be >= 0");
    TXL_CHECK(!scheme.traits().absolute, "model.mem_tokens = ", config.mem_tokens,
              ": memory tokens sit before and after the segment and need relative positions (",
              modules::memory_scheme_names(), ")");
  }
  std::unique_ptr<MechanismPart> for_model(TransformerLMImpl& model,
                                           const config::ModelConfig& config,
                                           const modules::InitOptions& init) const override {
    return std::make_unique<MemoryTokens>(model, config, init);
  }
  // Recurrent memory tokens alone, trained through 2 segments as they must be, and the same
  // tokens beside xl's memory.
  std::vector<Example> examples() const override {
    return {
        {"rmt", "attn_type xl, mem_len 0, mem_tokens 8, bptt_segments 1",
         [](config::ExperimentConfig& c) {
           c.model.attn_type = config::AttnType::kXl;
           c.model.mem_len = 0;
           c.model.mem_tokens = 8;
           c.train.bptt_segments = 1;
         }},
        {"rmt_xl", "attn_type xl, mem_tokens 8, bptt_segments 1", [](config::ExperimentConfig& c) {
           c.model.attn_type = config::AttnType::kXl;
           c.model.mem_tokens = 8;
           c.train.bptt_segments = 1;
         }}};
  }
};

}  // namespace

const MemoryMechanism& memory_tokens() {
  static const MemoryTokensMechanism kMechanism;
  return kMechanism;
}

}  // namespace txl::models::memory
