#pragma once
// The output layer: a (tied) softmax over the vocabulary, or the adaptive softmax of Grave et al.
// 2017 as the Transformer-XL paper code has it (ProjectedAdaptiveLogSoftmax), docs/model.md
// section 5.
//
// Without cutoffs: log p = log_softmax(h P_0 E^T + b) (P_0 only when a projection exists).
// With cutoffs [c_1, ..., c_n]: the head scores the head words [0, c_1) plus one logit per tail
// cluster; a word w of tail cluster k gets
//     log p(w) = log p_head(cluster k) + log p_k(w | cluster k),
// where p_k is a softmax over the cluster's words computed from h P_k (width d_k). The head's
// logit for cluster k sits in column c_1 + n - k (the last column is cluster 1), the paper
// code's order, so the rows of cluster_weight line up with its checkpoints.
//
// Tying (paper: tie_weight, tie_projs = [False, True, ...]): with tie_weight the word tables ARE
// the AdaptiveEmbedding's tables (the same tensors, not copies; they are registered only in the
// embedding, so a model's parameters() lists each once). With tie_projs the tail clusters'
// projections are the embedding's; the head projection is always this layer's own, as in the
// paper code. Biases, cluster_weight and cluster_bias are always this layer's own.
//
// Precision: logits follow the input's dtype (under autocast, bf16); every log-softmax is
// computed in fp32 when the logits are bf16/fp16 (a fp16/bf16 log-sum-exp over tens of thousands of
// words loses the small probabilities) and in the logits' own dtype otherwise (fp64 for gradient
// checks). nll and log_prob are returned in that log-softmax dtype.
//
// Shapes: N rows (e.g. B * Q), d_proj model width, V vocabulary, d_k width of cluster k,
// V_k words in cluster k, n tail clusters.

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "txl/modules/adaptive_embedding.h"
#include "txl/ops/projection.h"

namespace txl::modules {

struct AdaptiveSoftmaxOptions {
  std::int64_t n_token = 0;           // vocabulary size V
  std::int64_t d_embed = 0;           // width of the head cluster's table
  std::int64_t d_proj = 0;            // width of the hidden states scored
  std::vector<std::int64_t> cutoffs;  // cluster split points; empty = plain softmax
  std::int64_t div_val = 1;           // cluster k has width d_embed / div_val^k (floor)
  bool tie_weight = true;             // word tables are the embedding's tables
  bool tie_projs = true;              // tail projections are the embedding's projections
  double init_std = 0.02;       // own tables and cluster_weight: std (normal) or range (uniform)
  double proj_init_std = 0.01;  // own projections: std of a normal
  std::string init = "normal";  // normal | uniform
};

// A plain softmax's weights prepared for decoding (ops::Projection); undefined `words` for an
// adaptive one, which decodes through log_prob. `words_t` [d, V]: W^T for steps of more rows
// than the packed panels take (for_rows).
struct SoftmaxStep {
  ops::Projection words;
  torch::Tensor words_t;
};

class AdaptiveLogSoftmaxImpl : public torch::nn::Module {
 public:
  // `embedding` is the AdaptiveEmbedding to tie to; it must be given (and have the same n_token,
  // d_embed, d_proj, cutoffs and div_val) when tie_weight is set or a tail projection is to be
  // tied, otherwise txl::Error says so. Pass nullptr for an untied layer.
  explicit AdaptiveLogSoftmaxImpl(AdaptiveSoftmaxOptions options,
                                  AdaptiveEmbedding embedding = nullptr);

  // hidden [N, d_proj], target int64 [N] -> [N] negative log-likelihood of each target.
  // Any leading shape S works: hidden S + [d_proj], target S -> S. Without cutoffs it is one
  // log_softmax + nll_loss over h P E^T + b; with cutoffs the tail clusters are computed only for
  // the rows whose target falls in them (no [N, V] tensor). Throws txl::Error for a target
  // outside [0, n_token).
  torch::Tensor nll(const torch::Tensor& hidden, const torch::Tensor& target);

  // hidden [N, d_proj] (or S + [d_proj]) -> [N, V] (S + [V]) log-probabilities over the whole
  // vocabulary; exp sums to 1 along the last dimension.
  torch::Tensor log_prob(const torch::Tensor& hidden);

  // Decoding: prepared once per model (copies of the weights), then for a decoder of `rows`
  // rows; step_log_prob(weights, hidden [N, d_proj]) -> [N, V] is log_prob's result, a plain
  // softmax through ops::log_softmax_linear.
  SoftmaxStep prepare_step() const;
  static SoftmaxStep for_rows(const SoftmaxStep& weights, int64_t rows);
  torch::Tensor step_log_prob(const SoftmaxStep& weights, const torch::Tensor& hidden);

  const AdaptiveSoftmaxOptions& options() const { return options_; }
  const AdaptiveLayout& layout() const { return layout_; }
  bool weight_tied() const { return weight_tied_; }

  // Cluster k's word weights [V_k, d_k] and bias [V_k] (slices of one table for div_val = 1) and
  // projection [d_proj, d_k] (undefined when none: div_val = 1 and d_embed == d_proj).
  torch::Tensor cluster_words(std::int64_t k) const;
  torch::Tensor cluster_words_bias(std::int64_t k) const;
  const torch::Tensor& projection(std::int64_t k) const;
  // Word table t (t < 1 for div_val = 1, else t < n_clusters): the embedding's own tensor when
  // tied, out_layers.t.weight otherwise.
  const torch::Tensor& table(std::int64_t t) const;
  // Head logits of the tail clusters [n, d_embed], [n] (undefined without cutoffs).
  const torch::Tensor& cluster_weight() const { return cluster_weight_; }
  const torch::Tensor& cluster_bias() const { return cluster_bias_; }

 private:
  // The head's weight [c_1 + n, d_embed] and bias [c_1 + n]: head words, then one row per tail
  // cluster ([V, d_embed], [V] without cutoffs).
  std::pair<torch::Tensor, torch::Tensor> head_table() const;
  // h [R, d_proj] -> logits of cluster k's words [R, V_k] (the head: [R, c_1 + n]).
  torch::Tensor head_logits(const torch::Tensor& hidden) const;
  torch::Tensor tail_logits(const torch::Tensor& hidden, std::int64_t k) const;

  AdaptiveSoftmaxOptions options_;
  AdaptiveLayout layout_;
  bool weight_tied_ = false;
  torch::nn::ModuleList out_layers_;  // registered as out_layers: "t.bias" (+ "t.weight" untied)
  std::shared_ptr<torch::nn::Module> out_projs_;  // registered as out_projs: own projections "k"
  std::vector<torch::Tensor> tables_;             // per table: [V_t, d_t]
  std::vector<torch::Tensor> biases_;             // per table: [V_t]
  std::vector<torch::Tensor> projs_;              // per cluster: [d_proj, d_k] or undefined
  torch::Tensor cluster_weight_;                  // [n, d_embed]
  torch::Tensor cluster_bias_;                    // [n]
};
TORCH_MODULE(AdaptiveLogSoftmax);

}  // namespace txl::modules
