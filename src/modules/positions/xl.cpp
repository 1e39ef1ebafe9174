// Transformer-XL's relative positions (Dai et al. 2019, section 3.3; docs/model.md section 3):
//   score = (q_i + u)^T k_j + (q_i + v)^T W_R R[M+i-j]
// R the sinusoid encodings of the distances (clamped at clamp_len), W_R a projection per layer
// (r_net), u and v biases shared by every layer (the model's u_bias, v_bias; the paper code's
// r_w_bias, r_r_bias) or each layer's own (model.untie_r).

#include <tuple>

#include "parts.h"
#include "txl/ops/sinusoid.h"
#include "txl/util/error.h"

namespace txl::modules::positions {

namespace {

// [H, D] biases registered on `owner` under the paper code's places (u_bias, v_bias).
std::pair<torch::Tensor, torch::Tensor> register_biases(torch::nn::Module& owner,
                                                        const PositionShape& shape) {
  return {owner.register_parameter("u_bias", torch::empty({shape.n_head, shape.d_head})),
          owner.register_parameter("v_bias", torch::empty({shape.n_head, shape.d_head}))};
}

class XlModel final : public ModelPositions {
 public:
  XlModel(torch::nn::Module& model, const PositionShape& shape) {
    if (shape.options.own_biases) return;
    // Paper 3.3: u and v are shared by all layers.
    std::tie(u_, v_) = register_biases(model, shape);
    init_weight(u_, shape.init);
    init_weight(v_, shape.init);
  }
  void complete(PositionInputs& in, Dropout* drop) const override {
    if (drop != nullptr) in.table = (*drop)(in.table);  // R dropped out as the paper code does
    in.u = u_;
    in.v = v_;
  }

 private:
  torch::Tensor u_, v_;  // undefined with own_biases
};

class XlAttention final : public ByDistanceAttention {
 public:
  XlAttention(torch::nn::Module& attn, const PositionShape& shape) : shape_(shape) {
    const int64_t d = shape.d_model, hd = shape.n_head * shape.d_head;
    r_net_ = attn.register_module("r_net",
                                  torch::nn::Linear(torch::nn::LinearOptions(d, hd).bias(false)));
    if (shape.options.own_biases) std::tie(u_, v_) = register_biases(attn, shape);
  }
  void reset_parameters(const InitOptions& init) override {
    init_linear(r_net_, init);
    if (u_.defined()) init_weight(u_, init);
    if (v_.defined()) init_weight(v_, init);
  }

 protected:
  torch::Tensor encodings(const PositionInputs& in, int64_t k_len) override {
    const auto& r = in.table;
    TXL_CHECK(r.defined() && r.dim() == 2 && r.size(0) == k_len && r.size(1) == shape_.d_model,
              "attention: relative encodings must be [K = ", k_len, ", d = ", shape_.d_model, "]");
    return r_net_(r).view({k_len, shape_.n_head, shape_.d_head}).permute({1, 2, 0});  // [H, D, K]
  }
  std::pair<torch::Tensor, torch::Tensor> biases(const PositionInputs& in) const override {
    if (u_.defined()) return {u_, v_};
    TXL_CHECK(in.u.defined() && in.v.defined(), "attention: u and v biases [H = ", shape_.n_head,
              ", D = ", shape_.d_head, "] missing");
    return {in.u, in.v};
  }

 private:
  PositionShape shape_;
  torch::nn::Linear r_net_{nullptr};
  torch::Tensor u_, v_;  // own_biases only
};

class Xl final : public PositionScheme {
 public:
  std::string_view name() const override { return "xl"; }
  PositionTraits traits() const override {
    PositionTraits t;
    t.position_products = 1;
    t.fused_step = true;
    return t;
  }
  PositionInputs inputs(const PositionShape& shape, int64_t /*q_len*/, int64_t k_len,
                        int64_t clamp_len, torch::ScalarType dtype,
                        torch::Device device) const override {
    const auto distances = ops::relative_distances(k_len, clamp_len, device);     // [K], K-1 .. 0
    return {ops::sinusoid_encoding(distances.to(dtype), shape.d_model), {}, {}};  // R [K, d]
  }
  std::unique_ptr<ModelPositions> for_model(torch::nn::Module& model,
                                            const PositionShape& shape) const override {
    return std::make_unique<XlModel>(model, shape);
  }
  std::unique_ptr<AttentionPositions> for_attention(torch::nn::Module& attn,
                                                    const PositionShape& shape) const override {
    return std::make_unique<XlAttention>(attn, shape);
  }
};

}  // namespace

const PositionScheme& xl_positions() {
  static const Xl scheme;
  return scheme;
}

}  // namespace txl::modules::positions
