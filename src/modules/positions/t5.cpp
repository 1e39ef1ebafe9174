// T5's bucketed relative position bias (Raffel et al. 2020, section 2.1): score = q_i^T k_j /
// sqrt(D)
// + b_h(bucket(M+i-j)), one learned bias per head and bucket shared by every layer (rel_bias,
// [model.t5_buckets, H]). Causal buckets: a distance n below t5_buckets / 2 is its own bucket,
// longer ones share buckets logarithmically wider up to model.t5_max_distance, and every distance
// beyond it the last bucket; clamp_len clamps the distances first. x-transformers'
// RelativePositionBias computes the same buckets and bias, its table scaled by sqrt(D)
// (tests/modules/position_reference.py).
//
// The model's part turns a segment's buckets into the bias [H, Q, K] once for every layer; a
// decoder keeps the bias of every distance below its capacity and reads it per step.

#include <cmath>

#include "parts.h"
#include "txl/ops/masks.h"
#include "txl/util/error.h"

namespace txl::modules::positions {

namespace {

// The bucket of each distance n >= 0, int64 of n's shape, computed as x-transformers' causal
// _relative_position_bucket does, in float32 and in the same order, so that a distance on a
// bucket's edge falls in the same bucket.
torch::Tensor bucket_of(const torch::Tensor& n, int64_t buckets, int64_t max_distance) {
  const int64_t exact = buckets / 2;
  const auto wider = (torch::log(n.to(torch::kFloat) / static_cast<double>(exact)) /
                      std::log(static_cast<double>(max_distance) / static_cast<double>(exact)) *
                      static_cast<double>(buckets - exact))
                         .to(torch::kLong)
                         .add_(exact)
                         .clamp_max_(buckets - 1);
  return torch::where(n < exact, n, wider);
}

// The scheme's settings (model.t5_buckets, model.t5_max_distance), the model's defaults when
// not given.
int64_t bucket_count(const PositionShape& shape) { return shape.options.setting("t5_buckets", 32); }
int64_t far_distance(const PositionShape& shape) {
  return shape.options.setting("t5_max_distance", 128);
}

class T5Model final : public ModelPositions {
 public:
  T5Model(torch::nn::Module& model, const PositionShape& shape) {
    bias_ = model.register_parameter("rel_bias", torch::empty({bucket_count(shape), shape.n_head}));
    init_weight(bias_, shape.init);
  }
  // The buckets [Q, K] become the bias [H, Q, K].
  void complete(PositionInputs& in, Dropout* /*drop*/) const override {
    const auto& buckets = in.table;
    const int64_t q_len = buckets.size(0), k_len = buckets.size(1), n_head = bias_.size(1);
    in.table = bias_.index_select(0, buckets.reshape({-1}))
                   .view({q_len, k_len, n_head})
                   .permute({2, 0, 1});  // [H, Q, K]
  }

 private:
  torch::Tensor bias_;  // [buckets, H]
};

class T5Attention final : public AttentionPositions {
 public:
  explicit T5Attention(int64_t n_head) : n_head_(n_head) {}
  torch::Tensor scores(const torch::Tensor& q, const torch::Tensor& k, const PositionInputs& in,
                       double scale) override {
    const int64_t q_len = q.size(2), k_len = k.size(2);
    const auto& bias = in.table;
    TXL_CHECK(bias.defined() && bias.dim() == 3 && bias.size(0) == n_head_ &&
                  bias.size(1) == q_len && bias.size(2) == k_len,
              "attention: the T5 bias must be [H = ", n_head_, ", Q = ", q_len, ", K = ", k_len,
              "] (the model's rel_bias of the buckets)");
    return distance_scores(q * scale, {}, k, {}).add_(bias.unsqueeze(1));  // [H, B, Q, K]
  }
  PositionStep prepare_step(const PositionInputs& slots, int64_t clamp_len,
                            double /*scale*/) override {
    PositionStep w;
    // The slots' bias [H, 1, C] is of the distances C-1 .. 0: by distance, [H, C].
    w.table = slots.table.select(1, 0).flip(1).contiguous();
    w.clamp_len = clamp_len;
    return w;
  }
  torch::Tensor step_scores(const PositionStep& w, const torch::Tensor& q, const torch::Tensor& k,
                            int64_t /*used*/) const override {
    const int64_t q_len = q.size(2), k_len = k.size(2);
    const auto distances =
        ops::query_key_distances(q_len, k_len, -1, torch::kLong, q.device());  // [q, K]
    const auto bias = w.table.index_select(1, distances.reshape({-1}))
                          .view({n_head_, 1, q_len, k_len});  // [H, 1, q, K]
    return distance_scores(q, q, k, {}).add_(bias);           // [H, B, q, K]
  }

 private:
  int64_t n_head_;
};

class T5 final : public PositionScheme {
 public:
  std::string_view name() const override { return "t5"; }
  PositionTraits traits() const override { return {}; }
  void check(const PositionShape& shape) const override {
    const int64_t n = bucket_count(shape), far = far_distance(shape);
    TXL_CHECK(n >= 2, "model.t5_buckets = ", n, " must be >= 2");
    TXL_CHECK(far > n / 2, "model.t5_max_distance = ", far,
              " must be above t5_buckets / 2 = ", n / 2, " (the distances with a bucket each)");
  }
  PositionInputs inputs(const PositionShape& shape, int64_t q_len, int64_t k_len, int64_t clamp_len,
                        torch::ScalarType /*dtype*/, torch::Device device) const override {
    const auto distances =
        ops::query_key_distances(q_len, k_len, clamp_len, torch::kLong, device);  // [Q, K]
    return {bucket_of(distances, bucket_count(shape), far_distance(shape)),
            {},
            {}};  // int64 [Q, K]; the model's part makes them the bias
  }
  std::unique_ptr<ModelPositions> for_model(torch::nn::Module& model,
                                            const PositionShape& shape) const override {
    return std::make_unique<T5Model>(model, shape);
  }
  std::unique_ptr<AttentionPositions> for_attention(torch::nn::Module& /*attn*/,
                                                    const PositionShape& shape) const override {
    return std::make_unique<T5Attention>(shape.n_head);
  }
};

}  // namespace

const PositionScheme& t5_positions() {
  static const T5 scheme;
  return scheme;
}

}  // namespace txl::modules::positions
