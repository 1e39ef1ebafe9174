// Al-Rfou et al. (2018)'s learned absolute positions: every layer adds rows 0 .. K-1 of its own
// table (model.max_positions rows) to the keys concat(memory, segment) before attending, so
// positions are counted within the attention window; attention sees the content alone.

#include "parts.h"
#include "txl/modules/positions.h"
#include "txl/util/error.h"

namespace txl::modules::positions {

namespace {

class LearnedLayer final : public LayerPositions {
 public:
  LearnedLayer(torch::nn::Module& layer, const PositionShape& shape) {
    table_ = layer.register_module(
        "pos_emb", LearnedPositions(shape.options.setting("max_positions", 0),
                                    std::vector<int64_t>{shape.d_model}, shape.init));
  }
  void reset_parameters(const InitOptions& init) override { table_->reset_parameters(init); }
  void add(torch::Tensor& x, torch::Tensor& memory) override {
    const int64_t m_len = memory.defined() ? memory.size(1) : 0;
    auto table = table_->first(m_len + x.size(1));               // [K, d]
    if (m_len > 0) memory = memory + table.narrow(0, 0, m_len);  // [B, M, d]
    x = x + table.narrow(0, m_len, x.size(1));                   // [B, Q, d]
  }
  torch::Tensor add_at(const torch::Tensor& x, const torch::Tensor& positions) override {
    // Counted within the window the decoder reads.
    return x + table_->weight.index_select(0, positions.reshape({-1})).view(x.sizes());
  }

 private:
  LearnedPositions table_{nullptr};  // [max_positions, d]
};

class VanillaLearned final : public PositionScheme {
 public:
  std::string_view name() const override { return "vanilla_learned"; }
  PositionTraits traits() const override {
    PositionTraits t;
    t.absolute = true;
    t.caches_memory_kv = false;  // the memory's keys change with its positions every segment
    t.fused_step = true;
    return t;
  }
  void check(const PositionShape& shape) const override {
    const int64_t rows = shape.options.setting("max_positions", 0);
    TXL_CHECK(rows > 0, "model.max_positions = ", rows, " must be > 0");
  }
  std::unique_ptr<LayerPositions> for_layer(torch::nn::Module& layer,
                                            const PositionShape& shape) const override {
    return std::make_unique<LearnedLayer>(layer, shape);
  }
  std::unique_ptr<AttentionPositions> for_attention(torch::nn::Module& /*attn*/,
                                                    const PositionShape& /*shape*/) const override {
    return content_attention();
  }
};

}  // namespace

const PositionScheme& vanilla_learned_positions() {
  static const VanillaLearned scheme;
  return scheme;
}

}  // namespace txl::modules::positions
