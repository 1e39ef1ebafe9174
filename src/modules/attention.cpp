#include "txl/modules/attention.h"

#include <cmath>

#include "txl/ops/masks.h"
#include "txl/ops/rel_shift.h"
#include "txl/util/error.h"

namespace txl::modules {

MultiHeadAttentionImpl::MultiHeadAttentionImpl(const AttentionOptions& options)
    : options_(options) {
  const int64_t d = options.d_model, h = options.n_head, dh = options.d_head;
  TXL_CHECK(d > 0 && h > 0 && dh > 0, "attention: d_model, n_head, d_head must be > 0, got ", d,
            ", ", h, ", ", dh);
  TXL_CHECK(options.dropatt >= 0.0 && options.dropatt < 1.0,
            "attention: dropatt must be in [0, 1), got ", options.dropatt);
  qkv = register_module("qkv",
                        torch::nn::Linear(torch::nn::LinearOptions(d, 3 * h * dh).bias(false)));
  out = register_module("out", torch::nn::Linear(torch::nn::LinearOptions(h * dh, d).bias(false)));
  if (options.scheme == PositionScheme::kRelative) {
    r_net = register_module("r_net",
                            torch::nn::Linear(torch::nn::LinearOptions(d, h * dh).bias(false)));
    if (options.own_biases) {
      u_bias = register_parameter("u_bias", torch::empty({h, dh}));
      v_bias = register_parameter("v_bias", torch::empty({h, dh}));
    }
  } else if (options.scheme == PositionScheme::kShaw) {
    TXL_CHECK(options.max_rel_dist >= 0, "model.max_rel_dist must be >= 0, got ",
              options.max_rel_dist);
    rel_key = register_module(
        "rel_key",
        LearnedPositions(options.max_rel_dist + 1, std::vector<int64_t>{h, dh}, options.init));
  }
  dropatt = register_module("dropatt", Dropout(options.dropatt));
  reset_parameters(options.init);
}

void MultiHeadAttentionImpl::reset_parameters(const InitOptions& init) {
  init_linear(qkv, init);
  init_linear(out, init);
  if (r_net) init_linear(r_net, init);
  if (rel_key) rel_key->reset_parameters(init);
  if (u_bias.defined()) init_weight(u_bias, init);
  if (v_bias.defined()) init_weight(v_bias, init);
}

int64_t MultiHeadAttentionImpl::check_inputs(const torch::Tensor& x, const torch::Tensor& memory,
                                             const AttentionInputs& inputs,
                                             const KeyValueCache* cache) const {
  const int64_t d = options_.d_model, n_head = options_.n_head, d_head = options_.d_head;
  TXL_CHECK(x.dim() == 3 && x.size(2) == d, "attention: input must be [B, Q, d = ", d, "], got ",
            x.sizes());
  const int64_t batch = x.size(0), q_len = x.size(1);
  int64_t m_len = 0;
  if (memory.defined()) {
    TXL_CHECK(memory.dim() == 3 && memory.size(0) == batch && memory.size(2) == d,
              "attention: memory must be [B = ", batch, ", M, d = ", d, "], got ", memory.sizes());
    m_len = memory.size(1);
  }
  const int64_t k_len = m_len + q_len;
  TXL_CHECK(inputs.blocked.defined() && inputs.blocked.dim() == 4 &&
                inputs.blocked.size(2) == q_len && inputs.blocked.size(3) == k_len,
            "attention: blocked mask must be [1, B, Q = ", q_len, ", K = ", k_len, "]");
  TXL_CHECK(cache == nullptr || !torch::GradMode::is_enabled(),
            "attention: a key/value cache is for evaluation without gradients only");
  if (cache != nullptr && cache->memory.defined() && m_len > 0) {
    TXL_CHECK(cache->memory.dim() == 5 && cache->memory.size(0) == 2 && cache->memory.size(1) == n_head &&
                  cache->memory.size(2) == batch && cache->memory.size(3) == m_len &&
                  cache->memory.size(4) == d_head,
              "attention: cached keys and values must be [2, H = ", n_head, ", B = ", batch,
              ", M = ", m_len, ", D = ", d_head, "], got ", cache->memory.sizes());
  }
  return m_len;
}

MultiHeadAttentionImpl::Heads MultiHeadAttentionImpl::project(const torch::Tensor& x,
                                                              const torch::Tensor& memory,
                                                              KeyValueCache* cache) {
  const int64_t n_head = options_.n_head, d_head = options_.d_head, hd = n_head * d_head;
  const int64_t batch = x.size(0), q_len = x.size(1);
  const int64_t m_len = memory.defined() ? memory.size(1) : 0, k_len = m_len + q_len;
  Heads h;
  if (m_len == 0) {
    auto heads = qkv(x)  // [B, Q, 3 H D]
                     .view({batch, q_len, 3, n_head, d_head})
                     .permute({2, 3, 0, 1, 4})
                     .contiguous();  // [3, H, B, Q, D]
    if (cache != nullptr) cache->all = heads.narrow(0, 1, 2);  // [2, H, B, Q, D]
    // unbind, not three selects: its backward is one stack, not three zero-filled buffers.
    auto parts = heads.unbind(0);
    h.q = parts[0];  // [H, B, Q, D]
    h.k = parts[1];  // [H, B, Q, D]
    h.v = parts[2];  // [H, B, Q, D]
    return h;
  }
  const auto& w = qkv->weight;                // [3 H D, d], rows q | k | v
  h.q = torch::linear(x, w.narrow(0, 0, hd))  // [B, Q, H D]
            .view({batch, q_len, n_head, d_head})
            .permute({2, 0, 1, 3})
            .contiguous();  // [H, B, Q, D]
  torch::Tensor kv;         // [2, H, B, K, D]
  if (cache != nullptr && cache->memory.defined()) {
    auto fresh = torch::linear(x, w.narrow(0, hd, 2 * hd))  // [B, Q, 2 H D]
                     .view({batch, q_len, 2, n_head, d_head})
                     .permute({2, 3, 0, 1, 4});  // [2, H, B, Q, D], a view
    TXL_CHECK(cache->memory.scalar_type() == fresh.scalar_type(), "attention: cached keys and values are ",
              cache->memory.scalar_type(), " but the new ones ", fresh.scalar_type(),
              " (cache made under other autocast settings?)");
    kv = torch::cat({cache->memory, fresh}, 3);  // [2, H, B, K, D]: one copy, already in the heads' layout
  } else {
    kv = torch::linear(torch::cat({memory, x}, 1), w.narrow(0, hd, 2 * hd))  // [B, K, 2 H D]
             .view({batch, k_len, 2, n_head, d_head})
             .permute({2, 3, 0, 1, 4})
             .contiguous();  // [2, H, B, K, D]
  }
  if (cache != nullptr) cache->all = kv;
  auto parts = kv.unbind(0);
  h.k = parts[0];  // [H, B, K, D]
  h.v = parts[1];  // [H, B, K, D]
  return h;
}

torch::Tensor MultiHeadAttentionImpl::position_scores(const Heads& h,
                                                      const AttentionInputs& inputs) {
  const int64_t d = options_.d_model, n_head = options_.n_head, d_head = options_.d_head;
  const int64_t batch = h.q.size(1), q_len = h.q.size(2), k_len = h.k.size(2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d_head));
  if (options_.scheme == PositionScheme::kAbsolute)
    return torch::matmul(h.q * scale, h.k.transpose(-1, -2));  // [H, B, Q, K]
  torch::Tensor r;                      // [H, D, K], one row per distance column K-1 ... 0
  torch::Tensor q_content, q_position;  // [H, B, Q, D], scaled
  if (options_.scheme == PositionScheme::kRelative) {
    TXL_CHECK(inputs.rel_pos.defined() && inputs.rel_pos.dim() == 2 &&
                  inputs.rel_pos.size(0) == k_len && inputs.rel_pos.size(1) == d,
              "attention: relative encodings must be [K = ", k_len, ", d = ", d, "]");
    r = r_net(inputs.rel_pos).view({k_len, n_head, d_head}).permute({1, 2, 0});  // [H, D, K]
    // Paper 3.3: the query does not depend on its position, so the query-position part of
    // the absolute decomposition becomes a learned u (global content bias, term (c)) and v
    // (global position bias, term (d)).
    auto u = u_bias.defined() ? u_bias : inputs.u;    // [H, D]
    auto vb = v_bias.defined() ? v_bias : inputs.v;   // [H, D]
    TXL_CHECK(u.defined() && vb.defined() && u.sizes() == vb.sizes() && u.size(0) == n_head &&
                  u.size(1) == d_head,
              "attention: u and v biases [H = ", n_head, ", D = ", d_head, "] missing");
    q_content = (h.q + u.view({n_head, 1, 1, d_head})).mul_(scale);    // [H, B, Q, D]
    q_position = (h.q + vb.view({n_head, 1, 1, d_head})).mul_(scale);  // [H, B, Q, D]
  } else {
    TXL_CHECK(
        inputs.rel_pos.defined() && inputs.rel_pos.dim() == 1 && inputs.rel_pos.size(0) == k_len,
        "attention: Shaw distances must be int64 [K = ", k_len, "]");
    r = rel_key(inputs.rel_pos).permute({1, 2, 0});  // [H, D, K]
    q_content = h.q * scale;                         // [H, B, Q, D]
    q_position = q_content;                          // [H, B, Q, D]
  }
  auto content = torch::matmul(q_content, h.k.transpose(-1, -2));  // [H, B, Q, K]
  // All K distances in one product per head, then realigned (appendix B).
  auto by_distance = torch::matmul(q_position.reshape({n_head, batch * q_len, d_head}), r)
                         .view({n_head, batch, q_len, k_len});  // [H, B, Q, K]
  return content.add_(ops::rel_shift(by_distance));             // [H, B, Q, K]
}

torch::Tensor MultiHeadAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& memory,
                                              const AttentionInputs& inputs, torch::Tensor* probs,
                                              KeyValueCache* cache) {
  check_inputs(x, memory, inputs, cache);
  // Paper 3.2: keys and values over concat(memory, segment), queries over the segment.
  const Heads heads = project(x, memory, cache);
  auto scores = position_scores(heads, inputs);  // [H, B, Q, K]
  // Blocked keys get a large finite negative score (a query with no visible key averages
  // instead of producing NaN); added rather than filled, so the backward pass has nothing to do.
  scores.add_(inputs.score_bias.defined() ? inputs.score_bias
                                          : ops::score_bias(inputs.blocked, scores.scalar_type()));
  auto weights = torch::softmax(scores, -1);                     // [H, B, Q, K]
  if (probs != nullptr) *probs = weights.permute({1, 0, 2, 3});  // [B, H, Q, K]
  auto context = torch::matmul(dropatt(weights), heads.v);       // [H, B, Q, D]
  const int64_t batch = x.size(0), q_len = x.size(1);
  return out(context.permute({1, 2, 0, 3})
                 .reshape({batch, q_len, options_.n_head * options_.d_head}));  // [B, Q, d]
}

}  // namespace txl::modules
