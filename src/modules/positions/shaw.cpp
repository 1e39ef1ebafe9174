// Shaw et al. (2018)'s relative positions: score = q_i^T k_j + q_i^T A[min(M+i-j, max_rel_dist)],
// A a learned table per layer (rel_key) of the distances clipped to model.max_rel_dist.

#include "parts.h"
#include "txl/modules/positions.h"
#include "txl/ops/sinusoid.h"
#include "txl/util/error.h"

namespace txl::modules::positions {

namespace {

class ShawAttention final : public ByDistanceAttention {
 public:
  ShawAttention(torch::nn::Module& attn, const PositionShape& shape) {
    const int64_t max_rel_dist = shape.options.setting("max_rel_dist", 64);
    TXL_CHECK(max_rel_dist >= 0, "model.max_rel_dist must be >= 0, got ", max_rel_dist);
    rel_key_ = attn.register_module(
        "rel_key", LearnedPositions(max_rel_dist + 1,
                                    std::vector<int64_t>{shape.n_head, shape.d_head}, shape.init));
  }
  void reset_parameters(const InitOptions& init) override { rel_key_->reset_parameters(init); }

 protected:
  torch::Tensor encodings(const PositionInputs& in, int64_t k_len) override {
    const auto& distances = in.table;
    TXL_CHECK(distances.defined() && distances.dim() == 1 && distances.size(0) == k_len,
              "attention: Shaw distances must be int64 [K = ", k_len, "]");
    return rel_key_(distances).permute({1, 2, 0});  // [H, D, K]
  }

 private:
  LearnedPositions rel_key_{nullptr};  // [max_rel_dist + 1, H, D]
};

class Shaw final : public PositionScheme {
 public:
  std::string_view name() const override { return "shaw"; }
  PositionTraits traits() const override {
    PositionTraits t;
    t.position_products = 1;
    t.fused_step = true;
    return t;
  }
  PositionInputs inputs(const PositionShape& shape, int64_t /*q_len*/, int64_t k_len,
                        int64_t clamp_len, torch::ScalarType /*dtype*/,
                        torch::Device device) const override {
    const auto distances = ops::relative_distances(k_len, clamp_len, device);  // [K], K-1 .. 0
    return {distances.clamp_max(shape.options.setting("max_rel_dist", 64)), {}, {}};  // int64 [K]
  }
  std::unique_ptr<AttentionPositions> for_attention(torch::nn::Module& attn,
                                                    const PositionShape& shape) const override {
    return std::make_unique<ShawAttention>(attn, shape);
  }
};

}  // namespace

const PositionScheme& shaw_positions() {
  static const Shaw scheme;
  return scheme;
}

}  // namespace txl::modules::positions
