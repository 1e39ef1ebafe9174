#include "txl/modules/adaptive_softmax.h"

#include <utility>

#include "txl/ops/linear_cross_entropy.h"
#include "txl/util/error.h"

// Shapes: N rows scored, d_proj model width, V vocabulary, d_k width of cluster k, V_k words in
// cluster k, n tail clusters, c_1 head words.

namespace txl::modules {

namespace {

// log_softmax over the last dimension, in fp32 when the logits are half or bfloat16: a reduced
// precision log-sum-exp over many words rounds the small probabilities away. Other dtypes (fp32,
// fp64) are kept, so a double-precision gradient check stays in double.
torch::Tensor stable_log_softmax(const torch::Tensor& logits) {
  const auto type = logits.scalar_type();
  if (type == torch::kHalf || type == torch::kBFloat16)
    return torch::log_softmax(logits, -1, torch::kFloat);
  return torch::log_softmax(logits, -1);
}

// h [R, d_proj] -> [R, d_k]: the paper code's F.linear(h, P.t()), without the transposed copy.
torch::Tensor project(const torch::Tensor& hidden, const torch::Tensor& proj) {
  return proj.defined() ? torch::matmul(hidden, proj) : hidden;
}

}  // namespace

AdaptiveLogSoftmaxImpl::AdaptiveLogSoftmaxImpl(AdaptiveSoftmaxOptions options,
                                               AdaptiveEmbedding embedding)
    : options_(std::move(options)),
      layout_(make_adaptive_layout(options_.n_token, options_.d_embed, options_.d_proj,
                                   options_.cutoffs, options_.div_val, "AdaptiveLogSoftmax")) {
  check_adaptive_init(options_.init, options_.init_std, options_.proj_init_std,
                      "AdaptiveLogSoftmax");
  const bool single = options_.div_val == 1;
  const std::int64_t n_clusters = layout_.n_clusters();
  const std::int64_t n_tables = single ? 1 : n_clusters;
  // Projections exist per cluster when the clusters have their own widths or the one table is not
  // d_proj wide (paper code: out_projs is None otherwise).
  const bool has_projs = !single || options_.d_embed != options_.d_proj;
  const bool tie_tail_projs = options_.tie_projs && has_projs && n_clusters > 1;

  if (options_.tie_weight || tie_tail_projs) {
    TXL_CHECK(!embedding.is_empty(), "AdaptiveLogSoftmax: tie_weight = ", options_.tie_weight,
              " / tie_projs = ", options_.tie_projs,
              " needs the AdaptiveEmbedding to tie to; pass it, or set tie_weight and tie_projs to "
              "false");
    const AdaptiveEmbeddingOptions& e = embedding->options();
    TXL_CHECK(e.n_token == options_.n_token && e.d_embed == options_.d_embed &&
                  e.d_proj == options_.d_proj && e.cutoffs == options_.cutoffs &&
                  e.div_val == options_.div_val,
              "AdaptiveLogSoftmax: cannot tie to an AdaptiveEmbedding with another layout "
              "(embedding n_token ",
              e.n_token, ", d_embed ", e.d_embed, ", d_proj ", e.d_proj, ", div_val ", e.div_val,
              ", ", e.cutoffs.size(), " cutoffs; softmax n_token ", options_.n_token, ", d_embed ",
              options_.d_embed, ", d_proj ", options_.d_proj, ", div_val ", options_.div_val, ", ",
              options_.cutoffs.size(), " cutoffs); build both from the same model config");
  }
  weight_tied_ = options_.tie_weight;

  out_layers_ = register_module("out_layers", torch::nn::ModuleList());
  out_projs_ = register_module("out_projs", std::make_shared<torch::nn::Module>());
  for (std::int64_t t = 0; t < n_tables; ++t) {
    const std::int64_t rows = single ? options_.n_token : layout_.size(t);
    auto layer = std::make_shared<torch::nn::Module>();
    torch::Tensor weight;
    if (weight_tied_) {
      // The embedding's own tensor (same TensorImpl): updates, to() and checkpoint loads through
      // the embedding are seen here; it is deliberately not registered a second time.
      weight = embedding->table(t);  // [V_t, d_t]
    } else {
      weight = layer->register_parameter("weight",
                                         torch::empty({rows, layout_.widths[t]}));  // [V_t, d_t]
      adaptive_init_weight(weight, options_.init, options_.init_std);
    }
    torch::Tensor bias = layer->register_parameter("bias", torch::zeros({rows}));  // [V_t]
    out_layers_->push_back(layer);
    tables_.push_back(weight);
    biases_.push_back(bias);
  }
  for (std::int64_t k = 0; k < n_clusters; ++k) {
    torch::Tensor proj;
    if (has_projs) {
      if (k > 0 && tie_tail_projs) {
        proj = embedding->projection(single ? 0 : k);  // [d_proj, d_k]
      } else {
        proj = out_projs_->register_parameter(std::to_string(k),
                                              torch::empty({options_.d_proj, layout_.widths[k]}));
        torch::NoGradGuard no_grad;
        proj.normal_(0.0, options_.proj_init_std);
      }
    }
    projs_.push_back(proj);
  }
  if (n_clusters > 1) {
    cluster_weight_ = register_parameter(
        "cluster_weight", torch::empty({n_clusters - 1, options_.d_embed}));  // [n, d_embed]
    adaptive_init_weight(cluster_weight_, options_.init, options_.init_std);
    cluster_bias_ = register_parameter("cluster_bias", torch::zeros({n_clusters - 1}));  // [n]
  }
}

torch::Tensor AdaptiveLogSoftmaxImpl::cluster_words(std::int64_t k) const {
  TORCH_CHECK(k >= 0 && k < layout_.n_clusters(), "AdaptiveLogSoftmax::cluster_words: cluster ", k,
              " outside [0, ", layout_.n_clusters(), ")");
  // Sliced at use, never cached: a checkpoint load may swap the table's storage.
  if (options_.div_val == 1)
    return tables_[0].slice(0, layout_.begin(k), layout_.end(k));  // [V_k, d_embed]
  return tables_[k];                                               // [V_k, d_k]
}

torch::Tensor AdaptiveLogSoftmaxImpl::cluster_words_bias(std::int64_t k) const {
  TORCH_CHECK(k >= 0 && k < layout_.n_clusters(),
              "AdaptiveLogSoftmax::cluster_words_bias: cluster ", k, " outside [0, ",
              layout_.n_clusters(), ")");
  if (options_.div_val == 1) return biases_[0].slice(0, layout_.begin(k), layout_.end(k));  // [V_k]
  return biases_[k];                                                                        // [V_k]
}

const torch::Tensor& AdaptiveLogSoftmaxImpl::projection(std::int64_t k) const {
  TORCH_CHECK(k >= 0 && k < layout_.n_clusters(), "AdaptiveLogSoftmax::projection: cluster ", k,
              " outside [0, ", layout_.n_clusters(), ")");
  return projs_[k];
}

const torch::Tensor& AdaptiveLogSoftmaxImpl::table(std::int64_t t) const {
  TORCH_CHECK(t >= 0 && t < static_cast<std::int64_t>(tables_.size()),
              "AdaptiveLogSoftmax::table: index ", t, " outside [0, ", tables_.size(), ")");
  return tables_[t];
}

std::pair<torch::Tensor, torch::Tensor> AdaptiveLogSoftmaxImpl::head_table() const {
  if (layout_.n_clusters() == 1)
    return {cluster_words(0), cluster_words_bias(0)};  // [V, d_embed], [V]
  // Head words, then one row per tail cluster (Grave et al. 2017, section 4.1).
  return {torch::cat({cluster_words(0), cluster_weight_}),      // [c_1 + n, d_embed]
          torch::cat({cluster_words_bias(0), cluster_bias_})};  // [c_1 + n]
}

torch::Tensor AdaptiveLogSoftmaxImpl::head_logits(const torch::Tensor& hidden) const {
  const torch::Tensor projected = project(hidden, projs_[0]);  // [R, d_embed]
  const auto [weight, bias] = head_table();
  return torch::linear(projected, weight, bias);  // [R, c_1 + n] or [R, V]
}

torch::Tensor AdaptiveLogSoftmaxImpl::tail_logits(const torch::Tensor& hidden,
                                                  std::int64_t k) const {
  const torch::Tensor projected = project(hidden, projs_[k]);                // [R, d_k]
  return torch::linear(projected, cluster_words(k), cluster_words_bias(k));  // [R, V_k]
}

torch::Tensor AdaptiveLogSoftmaxImpl::nll(const torch::Tensor& hidden,
                                          const torch::Tensor& target) {
  TORCH_CHECK(hidden.dim() >= 1 && hidden.size(-1) == options_.d_proj,
              "AdaptiveLogSoftmax::nll: hidden must be [N, ", options_.d_proj, "] (d_proj), got ",
              hidden.sizes());
  TORCH_CHECK(target.sizes() == hidden.sizes().slice(0, hidden.dim() - 1),
              "AdaptiveLogSoftmax::nll: target ", target.sizes(),
              " must have the leading shape of hidden ", hidden.sizes());
  check_token_ids(target, options_.n_token, "AdaptiveLogSoftmax");
  const torch::Tensor h = hidden.reshape({-1, options_.d_proj});  // [N, d_proj]
  const torch::Tensor t = target.reshape({-1});                   // [N]

  // Every softmax below is one fused linear + log-softmax + nll (ops/linear_cross_entropy.h):
  // no [N, V] log-probabilities are kept for backward.
  const torch::Tensor projected = project(h, projs_[0]);  // [N, d_embed]
  const auto [head_weight, head_bias] = head_table();
  if (layout_.n_clusters() == 1) {
    // Plain (tied) softmax over h E^T + b.
    return ops::linear_cross_entropy(projected, head_weight, head_bias, t)
        .view(target.sizes());  // [N]
  }

  const std::int64_t n_tail = layout_.n_clusters() - 1;
  const std::int64_t head_words = layout_.end(0);
  // Column of each target in the head: its own for head words, its cluster's for tail words.
  torch::Tensor head_column = t.clone();  // [N]
  std::vector<torch::Tensor> rows(layout_.n_clusters());
  for (std::int64_t k = 1; k <= n_tail; ++k) {
    const torch::Tensor in_k = (t >= layout_.begin(k)).logical_and(t < layout_.end(k));  // [N]
    rows[k] = in_k.nonzero().reshape({-1});                                              // [N_k]
    if (rows[k].numel() > 0) head_column.index_fill_(0, rows[k], head_words + n_tail - k);
  }
  // -log p(word) for head targets, -log p(cluster) for tail targets.
  torch::Tensor nll =
      ops::linear_cross_entropy(projected, head_weight, head_bias, head_column);  // [N]
  for (std::int64_t k = 1; k <= n_tail; ++k) {
    if (rows[k].numel() == 0) continue;
    // Only the rows whose target is in cluster k pay for its softmax.
    const torch::Tensor h_k = project(h.index_select(0, rows[k]), projs_[k]);   // [N_k, d_k]
    const torch::Tensor local = t.index_select(0, rows[k]) - layout_.begin(k);  // [N_k]
    const torch::Tensor word =
        ops::linear_cross_entropy(h_k, cluster_words(k), cluster_words_bias(k), local);  // [N_k]
    nll = nll.index_add(0, rows[k], word.to(nll.scalar_type()));                         // [N]
  }
  return nll.view(target.sizes());  // [N]
}

torch::Tensor AdaptiveLogSoftmaxImpl::log_prob(const torch::Tensor& hidden) {
  TORCH_CHECK(hidden.dim() >= 1 && hidden.size(-1) == options_.d_proj,
              "AdaptiveLogSoftmax::log_prob: hidden must be [N, ", options_.d_proj,
              "] (d_proj), got ", hidden.sizes());
  const torch::Tensor h = hidden.reshape({-1, options_.d_proj});  // [N, d_proj]
  std::vector<std::int64_t> shape = hidden.sizes().vec();
  shape.back() = options_.n_token;
  const torch::Tensor head_logprob = stable_log_softmax(head_logits(h));  // [N, c_1 + n] or [N, V]
  if (layout_.n_clusters() == 1) return head_logprob.view(shape);

  const std::int64_t n_tail = layout_.n_clusters() - 1;
  const std::int64_t head_words = layout_.end(0);
  std::vector<torch::Tensor> parts{head_logprob.narrow(1, 0, head_words)};  // [N, c_1]
  for (std::int64_t k = 1; k <= n_tail; ++k) {
    const torch::Tensor cluster = head_logprob.narrow(1, head_words + n_tail - k, 1);  // [N, 1]
    const torch::Tensor tail_logprob = stable_log_softmax(tail_logits(h, k));          // [N, V_k]
    parts.push_back(tail_logprob.to(cluster.scalar_type()) + cluster);                 // [N, V_k]
  }
  return torch::cat(parts, 1).view(shape);  // [N, V]
}

SoftmaxStep AdaptiveLogSoftmaxImpl::prepare_step() const {
  SoftmaxStep w;
  if (layout_.n_clusters() == 1 && !projs_[0].defined()) {
    torch::NoGradGuard no_grad;
    w.words = ops::Projection::packed_for_decoding(cluster_words(0), cluster_words_bias(0));
  }
  return w;
}

SoftmaxStep AdaptiveLogSoftmaxImpl::for_rows(const SoftmaxStep& weights, int64_t rows) {
  SoftmaxStep w = weights;
  if (w.words.weight().defined() && ops::reads_transposed(w.words, rows)) {
    w.words_t = w.words.weight().t().contiguous();  // [d, V]
  }
  return w;
}

torch::Tensor AdaptiveLogSoftmaxImpl::step_log_prob(const SoftmaxStep& weights,
                                                    const torch::Tensor& hidden) {
  if (!weights.words.weight().defined()) return log_prob(hidden);          // [N, V]
  return ops::log_softmax_linear(weights.words, hidden, weights.words_t);  // [N, V]
}

}  // namespace txl::modules
