// Su et al. (2021)'s rotary positions (RoPE): score = (R_{M+i} q_i)^T (R_j k_j), R_p turning each
// pair of dimensions by p times its frequency (ops/rotary.h), so the score sees i - j only. It
// has no distance table: a clamp has nothing to cap and is refused.

#include "parts.h"
#include "txl/ops/rotary.h"
#include "txl/util/error.h"

namespace txl::modules::positions {

namespace {

class RopeAttention final : public AttentionPositions {
 public:
  explicit RopeAttention(int64_t d_head) : d_head_(d_head) {}
  torch::Tensor scores(const torch::Tensor& q, const torch::Tensor& k, const PositionInputs& in,
                       double scale) override {
    const int64_t q_len = q.size(2), k_len = k.size(2);
    const auto& turns = in.table;
    TXL_CHECK(
        turns.defined() && turns.dim() == 3 && turns.size(1) == k_len && turns.size(2) == d_head_,
        "attention: rotary turns must be [2, K = ", k_len, ", D = ", d_head_, "]");
    // Query i at position M + i, key j at j (concat(memory, segment)).
    return distance_scores(ops::rotate(q, turns, k_len - q_len).mul_(scale), {},
                           ops::rotate(k, turns, 0), {});  // [H, B, Q, K]
  }
  PositionStep prepare_step(const PositionInputs& slots, int64_t clamp_len,
                            double /*scale*/) override {
    PositionStep w;
    w.table = slots.table;  // [2, C, D], turns of slots 0 .. C-1
    w.clamp_len = clamp_len;
    return w;
  }
  torch::Tensor step_scores(const PositionStep& w, const torch::Tensor& q, const torch::Tensor& k,
                            int64_t used) const override {
    // The buffer keeps keys unturned (compaction moves them to other slots): slot j is position j.
    const auto query = ops::rotate(q, w.table, used);
    return distance_scores(query, query, ops::rotate(k, w.table, 0), {});  // [H, B, q, K]
  }

 private:
  int64_t d_head_;
};

class Rope final : public PositionScheme {
 public:
  std::string_view name() const override { return "rope"; }
  PositionTraits traits() const override {
    PositionTraits t;
    t.clampable = false;
    return t;
  }
  void check(const PositionShape& shape) const override {
    TXL_CHECK(shape.d_head % 2 == 0, "model.d_head = ", shape.d_head,
              " must be even for rotary positions (pairs of dimensions turn)");
  }
  PositionInputs inputs(const PositionShape& shape, int64_t /*q_len*/, int64_t k_len,
                        int64_t /*clamp_len*/, torch::ScalarType dtype,
                        torch::Device device) const override {
    return {ops::rotary_table(k_len, shape.d_head, dtype, device), {}, {}};  // [2, K, D]
  }
  std::unique_ptr<AttentionPositions> for_attention(torch::nn::Module& /*attn*/,
                                                    const PositionShape& shape) const override {
    return std::make_unique<RopeAttention>(shape.d_head);
  }
};

}  // namespace

const PositionScheme& rope_positions() {
  static const Rope scheme;
  return scheme;
}

}  // namespace txl::modules::positions
