// Press et al. (2022)'s linear biases (ALiBi): score = q_i^T k_j - m_h (M+i-j), a slope m_h per
// head (ops/alibi.h) times the distance, which clamp_len clamps.

#include "txl/ops/alibi.h"
#include "parts.h"
#include "txl/ops/masks.h"
#include "txl/util/error.h"

namespace txl::modules::positions {

namespace {

// scores [H, B, Q, K] less each head's slope [H, 1, 1, 1] times the distances [Q, K].
torch::Tensor less_slopes(torch::Tensor scores, const torch::Tensor& slopes,
                          const torch::Tensor& distances) {
  return scores.sub_(slopes * distances.to(scores.scalar_type()));  // [H, B, Q, K]
}

class AlibiAttention final : public AttentionPositions {
 public:
  explicit AlibiAttention(int64_t n_head) : n_head_(n_head) {}
  torch::Tensor scores(const torch::Tensor& q, const torch::Tensor& k, const PositionInputs& in,
                       double scale) override {
    const int64_t q_len = q.size(2), k_len = k.size(2);
    const auto& distances = in.table;
    TXL_CHECK(distances.defined() && distances.dim() == 2 && distances.size(0) == q_len &&
                  distances.size(1) == k_len,
              "attention: ALiBi distances must be [Q = ", q_len, ", K = ", k_len, "]");
    auto scores = distance_scores(q * scale, {}, k, {});  // [H, B, Q, K]
    const auto slopes = ops::alibi_slopes(n_head_, scores.scalar_type(), scores.device());
    return less_slopes(scores, slopes.view({n_head_, 1, 1, 1}), distances);  // [H, B, Q, K]
  }
  PositionStep prepare_step(const PositionInputs& slots, int64_t clamp_len,
                            double /*scale*/) override {
    PositionStep w;
    w.table = ops::alibi_slopes(n_head_, slots.table.scalar_type(), slots.table.device())
                  .view({n_head_, 1, 1, 1});  // [H, 1, 1, 1]
    w.clamp_len = clamp_len;
    return w;
  }
  torch::Tensor step_scores(const PositionStep& w, const torch::Tensor& q, const torch::Tensor& k,
                            int64_t /*used*/) const override {
    const int64_t q_len = q.size(2), k_len = k.size(2);
    auto scores = distance_scores(q, q, k, {});  // [H, B, q, K]
    return less_slopes(
        scores, w.table,
        ops::query_key_distances(q_len, k_len, w.clamp_len, scores.scalar_type(), scores.device()));
  }

 private:
  int64_t n_head_;
};

class Alibi final : public PositionScheme {
 public:
  std::string_view name() const override { return "alibi"; }
  PositionTraits traits() const override { return {}; }
  PositionInputs inputs(const PositionShape& /*shape*/, int64_t q_len, int64_t k_len,
                        int64_t clamp_len, torch::ScalarType dtype,
                        torch::Device device) const override {
    return {ops::query_key_distances(q_len, k_len, clamp_len, dtype, device), {}, {}};  // [Q, K]
  }
  std::unique_ptr<AttentionPositions> for_attention(torch::nn::Module& /*attn*/,
                                                    const PositionShape& shape) const override {
    return std::make_unique<AlibiAttention>(shape.n_head);
  }
};

}  // namespace

const PositionScheme& alibi_positions() {
  static const Alibi scheme;
  return scheme;
}

}  // namespace txl::modules::positions
