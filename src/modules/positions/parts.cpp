#include "parts.h"

#include "txl/ops/matmul.h"
#include "txl/ops/rel_shift.h"
#include "txl/util/error.h"

namespace txl::modules {

torch::Tensor distance_scores(const torch::Tensor& q_content, const torch::Tensor& q_position,
                              const torch::Tensor& keys, const torch::Tensor& r) {
  auto content = ops::batched_matmul(q_content, keys.transpose(-1, -2));  // [H, B, Q, K]
  if (!r.defined()) return content;
  const int64_t n_head = q_position.size(0), batch = q_position.size(1);
  const int64_t q_len = q_position.size(2), d_head = q_position.size(3), k_len = keys.size(2);
  // All K distances in one product per head, then realigned (appendix B). A single query sits
  // at the last key: its columns are already its distances.
  auto by_distance = torch::matmul(q_position.reshape({n_head, batch * q_len, d_head}), r)
                         .view({n_head, batch, q_len, k_len});                  // [H, B, Q, K]
  return content.add_(q_len == 1 ? by_distance : ops::rel_shift(by_distance));  // [H, B, Q, K]
}

namespace positions {

namespace {

class ContentAttention final : public AttentionPositions {
 public:
  torch::Tensor scores(const torch::Tensor& q, const torch::Tensor& k, const PositionInputs& /*in*/,
                       double scale) override {
    return distance_scores(q * scale, {}, k, {});  // [H, B, Q, K]
  }
  PositionStep prepare_step(const PositionInputs& /*slots*/, int64_t /*clamp_len*/,
                            double /*scale*/) override {
    return {};
  }
  torch::Tensor step_scores(const PositionStep& /*w*/, const torch::Tensor& q,
                            const torch::Tensor& k, int64_t /*used*/) const override {
    return distance_scores(q, q, k, {});  // [H, B, q, K]
  }
};

}  // namespace

std::unique_ptr<AttentionPositions> content_attention() {
  return std::make_unique<ContentAttention>();
}

torch::Tensor ByDistanceAttention::scores(const torch::Tensor& q, const torch::Tensor& k,
                                          const PositionInputs& in, double scale) {
  const int64_t n_head = q.size(0), d_head = q.size(3);
  const auto [u, v] = biases(in);
  torch::Tensor q_content, q_position;  // [H, B, Q, D], scaled
  if (u.defined()) {
    // Paper 3.3: the query does not depend on its position, so the query-position part of the
    // absolute decomposition becomes a learned u (global content bias, term (c)) and v (global
    // position bias, term (d)).
    TXL_CHECK(v.defined() && u.sizes() == v.sizes() && u.dim() == 2 && u.size(0) == n_head &&
                  u.size(1) == d_head,
              "attention: u and v biases [H = ", n_head, ", D = ", d_head, "] missing");
    q_content = (q + u.view({n_head, 1, 1, d_head})).mul_(scale);   // [H, B, Q, D]
    q_position = (q + v.view({n_head, 1, 1, d_head})).mul_(scale);  // [H, B, Q, D]
  } else {
    q_content = q * scale;   // [H, B, Q, D]
    q_position = q_content;  // [H, B, Q, D]
  }
  return distance_scores(q_content, q_position, k, encodings(in, k.size(2)));  // [H, B, Q, K]
}

PositionStep ByDistanceAttention::prepare_step(const PositionInputs& slots, int64_t clamp_len,
                                               double scale) {
  PositionStep w;
  const int64_t capacity = slots.table.size(0);
  w.table = encodings(slots, capacity).contiguous();             // [H, D, C]
  w.by_distance = w.table.flip(2).transpose(1, 2).contiguous();  // [H, C, D]
  w.clamp_len = clamp_len;
  const auto [u, v] = biases(slots);
  if (u.defined()) {
    const int64_t n_head = u.size(0), d_head = u.size(1);
    w.u = (u * scale).view({n_head, 1, 1, d_head});  // [H, 1, 1, D]
    w.v = (v * scale).view({n_head, 1, 1, d_head});  // [H, 1, 1, D]
  }
  return w;
}

torch::Tensor ByDistanceAttention::step_scores(const PositionStep& w, const torch::Tensor& q,
                                               const torch::Tensor& k, int64_t /*used*/) const {
  const int64_t k_len = k.size(2);
  const auto r = w.table.narrow(2, w.table.size(2) - k_len, k_len);  // [H, D, K]
  return distance_scores(w.u.defined() ? q + w.u : q, w.v.defined() ? q + w.v : q, k, r);
}

}  // namespace positions
}  // namespace txl::modules
