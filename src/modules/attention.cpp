#include "txl/modules/attention.h"

#include <cmath>

#include "txl/ops/cached_attention.h"
#include "txl/ops/masks.h"
#include "txl/ops/matmul.h"
#include "txl/util/error.h"

namespace txl::modules {

MultiHeadAttentionImpl::MultiHeadAttentionImpl(const AttentionOptions& options)
    : options_(options), scheme_(&position_scheme(options.positions.scheme)) {
  const int64_t d = options.d_model, h = options.n_head, dh = options.d_head;
  TXL_CHECK(d > 0 && h > 0 && dh > 0, "attention: d_model, n_head, d_head must be > 0, got ", d,
            ", ", h, ", ", dh);
  TXL_CHECK(options.dropatt >= 0.0 && options.dropatt < 1.0,
            "attention: dropatt must be in [0, 1), got ", options.dropatt);
  scheme_->check(options.position_shape());
  qkv = register_module("qkv",
                        torch::nn::Linear(torch::nn::LinearOptions(d, 3 * h * dh).bias(false)));
  out = register_module("out", torch::nn::Linear(torch::nn::LinearOptions(h * dh, d).bias(false)));
  positions_ = scheme_->for_attention(*this, options.position_shape());
  dropatt = register_module("dropatt", Dropout(options.dropatt));
  reset_parameters(options.init);
}

void MultiHeadAttentionImpl::reset_parameters(const InitOptions& init) {
  init_linear(qkv, init);
  init_linear(out, init);
  positions_->reset_parameters(init);
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
    TXL_CHECK(cache->memory.dim() == 5 && cache->memory.size(0) == 2 &&
                  cache->memory.size(1) == n_head && cache->memory.size(2) == batch &&
                  cache->memory.size(3) == m_len && cache->memory.size(4) == d_head,
              "attention: cached keys and values must be [2, H = ", n_head, ", B = ", batch,
              ", M = ", m_len, ", D = ", d_head, "], got ", cache->memory.sizes());
  }
  return m_len;
}

torch::Tensor MultiHeadAttentionImpl::content_attention(const torch::Tensor& x,
                                                        const torch::Tensor& rows,
                                                        const torch::Tensor& visible) const {
  const int64_t n_head = options_.n_head, d_head = options_.d_head, hd = n_head * d_head;
  const int64_t batch = x.size(0), q_len = x.size(1), n = rows.size(1);
  const auto w = qkv->weight.detach();           // [3 H D, d]: constants to this loss
  auto q = torch::linear(x, w.narrow(0, 0, hd))  // [B, Q, H D]
               .view({batch, q_len, n_head, d_head})
               .permute({2, 0, 1, 3});                    // [H, B, Q, D]
  auto kv = torch::linear(rows, w.narrow(0, hd, 2 * hd))  // [B, N, 2 H D]
                .view({batch, n, 2, n_head, d_head})
                .permute({2, 3, 0, 1, 4});  // [2, H, B, N, D]
  auto scores = torch::matmul(q, kv[0].transpose(-1, -2)) /
                std::sqrt(static_cast<double>(d_head));               // [H, B, Q, N]
  const auto blocked = visible.logical_not().view({1, batch, 1, n});  // [1, B, 1, N]
  scores = scores + ops::score_bias(blocked, scores.scalar_type());
  return torch::matmul(torch::softmax(scores, -1), kv[1]);  // [H, B, Q, D]
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
                     .contiguous();                            // [3, H, B, Q, D]
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
    TXL_CHECK(cache->memory.scalar_type() == fresh.scalar_type(),
              "attention: cached keys and values are ", cache->memory.scalar_type(),
              " but the new ones ", fresh.scalar_type(),
              " (cache made under other autocast settings?)");
    kv = torch::cat({cache->memory, fresh},
                    3);  // [2, H, B, K, D]: one copy, already in the heads' layout
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

torch::Tensor MultiHeadAttentionImpl::mix(torch::Tensor scores, const torch::Tensor& bias,
                                          const torch::Tensor& values,
                                          const ops::Projection& out_weight, torch::Tensor* probs,
                                          const ContextHook& context_hook,
                                          const torch::Tensor& queries) {
  // Blocked keys get a large finite negative score (a query with no visible key averages
  // instead of producing NaN); added rather than filled, so the backward pass has nothing to do.
  scores.add_(bias);
  auto weights = torch::softmax(scores, -1);                     // [H, B, Q, K]
  if (probs != nullptr) *probs = weights.permute({1, 0, 2, 3});  // [B, H, Q, K]
  auto context = ops::batched_matmul(dropatt(weights), values);  // [H, B, Q, D]
  if (context_hook) context = context_hook(queries, context);    // [H, B, Q, D]
  const int64_t batch = context.size(1), q_len = context.size(2);
  return out_weight(context.permute({1, 2, 0, 3})
                        .reshape({batch, q_len, options_.n_head * options_.d_head}));  // [B, Q, d]
}

torch::Tensor MultiHeadAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& memory,
                                              const AttentionInputs& inputs, torch::Tensor* probs,
                                              KeyValueCache* cache) {
  check_inputs(x, memory, inputs, cache);
  // Paper 3.2: keys and values over concat(memory, segment), queries over the segment.
  const Heads heads = project(x, memory, cache);
  const double scale = 1.0 / std::sqrt(static_cast<double>(options_.d_head));
  auto scores = positions_->scores(heads.q, heads.k, inputs.positions, scale);  // [H, B, Q, K]
  const auto bias = inputs.score_bias.defined()
                        ? inputs.score_bias
                        : ops::score_bias(inputs.blocked, scores.scalar_type());  // [1, B, Q, K]
  const auto queries = inputs.context ? heads.q * scale : torch::Tensor();        // [H, B, Q, D]
  return mix(scores, bias, heads.v, ops::Projection(out->weight), probs, inputs.context,
             queries);  // [B, Q, d]
}

AttentionStep MultiHeadAttentionImpl::prepare_step(const PositionInputs& slots, int64_t clamp_len,
                                                   const torch::Tensor& zero_row) {
  torch::NoGradGuard no_grad;
  const int64_t n_head = options_.n_head, d_head = options_.d_head;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d_head));
  AttentionStep w;
  auto qkv_weight = qkv->weight.detach().clone();        // [3 H D, d]
  qkv_weight.narrow(0, 0, n_head * d_head).mul_(scale);  // queries come out scaled
  w.qkv = ops::Projection::packed_for_decoding(qkv_weight);
  w.out = ops::Projection::packed_for_decoding(out->weight);
  w.positions = positions_->prepare_step(slots, clamp_len, scale);
  if (zero_row.defined()) {
    w.zero_kv = torch::linear(zero_row, qkv_weight)  // [1, 3 H D]
                    .view({3, n_head, 1, 1, d_head})
                    .narrow(0, 1, 2)
                    .contiguous();  // [2, H, 1, 1, D]
  }
  return w;
}

torch::Tensor MultiHeadAttentionImpl::project_heads(const AttentionStep& weights,
                                                    const torch::Tensor& h) const {
  return weights
      .qkv(h)  // [B, n, 3 H D]
      .view({h.size(0), h.size(1), 3, options_.n_head, options_.d_head})
      .permute({2, 3, 0, 1, 4});  // [3, H, B, n, D], a view
}

torch::Tensor MultiHeadAttentionImpl::keys_values(const torch::Tensor& h) const {
  torch::NoGradGuard no_grad;
  const int64_t inner = options_.n_head * options_.d_head;
  return torch::linear(h, qkv->weight.narrow(0, inner, 2 * inner))  // [B, n, 2 H D]
      .view({h.size(0), h.size(1), 2, options_.n_head, options_.d_head})
      .permute({2, 3, 0, 1, 4});  // [2, H, B, n, D]
}

void MultiHeadAttentionImpl::write_keys(const AttentionStep& weights, const torch::Tensor& h,
                                        const torch::Tensor& slots) const {
  slots.copy_(project_heads(weights, h).narrow(0, 1, 2));  // [2, H, B, n, D]
}

bool MultiHeadAttentionImpl::steps_by_first_slot(const torch::Tensor& like) const {
  return scheme_->traits().fused_step && ops::attend_cached_takes(like);
}

void MultiHeadAttentionImpl::write_zero_memory(const AttentionStep& weights,
                                               const torch::Tensor& slots) {
  slots.copy_(weights.zero_kv);  // [2, H, B', n, D] from [2, H, 1, 1, D]
}

void MultiHeadAttentionImpl::write_zero_slots(const AttentionStep& weights, const torch::Tensor& kv,
                                              int64_t used, const StepMask& mask) {
  if (!weights.zero_kv.defined()) return;
  for (size_t b = 0; b < mask.zero_slots.size(); ++b) {
    const int64_t n = mask.zero_slots[b];
    if (n <= 0) continue;
    auto slots = kv.narrow(2, static_cast<int64_t>(b), 1).narrow(3, used, n);  // [2, H, 1, n, D]
    write_zero_memory(weights, slots);
  }
}

torch::Tensor MultiHeadAttentionImpl::step(const AttentionStep& weights, const torch::Tensor& h,
                                           const torch::Tensor& kv, int64_t used,
                                           const StepMask& mask) {
  const int64_t n_head = options_.n_head, d_head = options_.d_head;
  const int64_t batch = h.size(0), q = h.size(1), k_len = used + q;
  if (!mask.bias.defined()) {
    // One query per row: the fused kernel writes its key and value and attends.
    auto qkv_rows = weights.qkv(h).view({batch, 3, n_head, d_head});  // [B, 3, H, D]
    ops::CachedKeys keys;
    keys.buffer = kv;
    keys.by_distance = weights.positions.by_distance;
    keys.u = weights.positions.u;
    keys.v = weights.positions.v;
    auto context = ops::attend_cached(qkv_rows, keys, k_len, mask.first);  // [B, H D]
    write_zero_slots(weights, kv, used, mask);  // a padding query's own output is never read
    if (mask.context) {
      const auto query = qkv_rows.select(1, 0).transpose(0, 1).unsqueeze(2);  // [H, B, 1, D]
      const auto heads = context.view({batch, n_head, 1, d_head}).transpose(0, 1);
      context = mask.context(query, heads).transpose(0, 1).reshape({batch, n_head * d_head});
    }
    return weights.out(context.unsqueeze(1));  // [B, 1, d]
  }
  const auto heads = project_heads(weights, h);        // [3, H, B, q, D], a view
  kv.narrow(3, used, q).copy_(heads.narrow(0, 1, 2));  // [2, H, B, q, D] into the buffer
  write_zero_slots(weights, kv, used, mask);
  const auto query = heads.select(0, 0);                    // [H, B, q, D], scaled
  const auto keys = kv.select(0, 0).narrow(2, 0, k_len);    // [H, B, K, D]
  const auto values = kv.select(0, 1).narrow(2, 0, k_len);  // [H, B, K, D]
  auto scores = positions_->step_scores(weights.positions, query, keys, used);       // [H, B, q, K]
  return mix(scores, mask.bias, values, weights.out, nullptr, mask.context, query);  // [B, q, d]
}

}  // namespace txl::modules
