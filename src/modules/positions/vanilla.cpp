// Vaswani et al. (2017)'s absolute positions: the sinusoid of each token's position within its
// segment (0 .. Q-1) added to its embedding; attention sees the content alone.

#include "parts.h"
#include "txl/ops/sinusoid.h"
#include "txl/util/error.h"

namespace txl::modules::positions {

namespace {

class VanillaModel final : public ModelPositions {
 public:
  explicit VanillaModel(int64_t d_model) : d_model_(d_model) {}
  torch::Tensor embed(const torch::Tensor& x, const torch::Tensor& positions) const override {
    auto shape = positions.sizes().vec();
    shape.push_back(d_model_);
    return x + ops::sinusoid_encoding(positions.reshape({-1}).to(x.scalar_type()), d_model_)
                   .view(shape);  // [S..., d]
  }

 private:
  int64_t d_model_;
};

class Vanilla final : public PositionScheme {
 public:
  std::string_view name() const override { return "vanilla"; }
  PositionTraits traits() const override {
    PositionTraits t;
    t.absolute = true;
    t.fused_step = true;
    return t;
  }
  void check(const PositionShape& shape) const override {
    TXL_CHECK(shape.d_model % 2 == 0, "model.d_model = ", shape.d_model,
              " must be even for sinusoid positions");
  }
  std::unique_ptr<ModelPositions> for_model(torch::nn::Module& /*model*/,
                                            const PositionShape& shape) const override {
    return std::make_unique<VanillaModel>(shape.d_model);
  }
  std::unique_ptr<AttentionPositions> for_attention(torch::nn::Module& /*attn*/,
                                                    const PositionShape& /*shape*/) const override {
    return content_attention();
  }
};

}  // namespace

const PositionScheme& vanilla_positions() {
  static const Vanilla scheme;
  return scheme;
}

}  // namespace txl::modules::positions
