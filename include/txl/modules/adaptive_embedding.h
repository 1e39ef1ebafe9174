#pragma once
// Token embedding with adaptive input (Baevski & Auli 2019) as the Transformer-XL paper code
// builds it, docs/model.md section 5. The vocabulary, sorted by frequency, is split at `cutoffs`
// into clusters; with div_val > 1 cluster k has its own table of width d_embed / div_val^k and a
// projection to d_proj, so rare words cost fewer parameters. With div_val = 1 there is a single
// table (the cutoffs then only matter to the output layer, as in the paper code).
//
// Shapes: B batch, T tokens per row, N = B * T, V vocabulary, d_proj model width,
// d_k width of cluster k's table, V_k words in cluster k.

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace txl::modules {

struct AdaptiveEmbeddingOptions {
  std::int64_t n_token = 0;  // vocabulary size V
  std::int64_t d_embed = 0;  // width of the head cluster's table
  std::int64_t d_proj = 0;   // model width d the embedding is projected to
  std::vector<std::int64_t>
      cutoffs;  // cluster split points, e.g. [20000, 40000, 200000]; empty = one cluster
  std::int64_t div_val = 1;     // cluster k has width d_embed / div_val^k (floor)
  double init_std = 0.02;       // tables: std (init = normal) or range (init = uniform)
  double proj_init_std = 0.01;  // projections: std of a normal
  std::string init = "normal";  // normal | uniform
};

// The cluster layout shared by the adaptive input and the adaptive softmax.
struct AdaptiveLayout {
  std::vector<std::int64_t>
      bounds;  // [0, c_1, ..., c_n, V]: cluster k holds ids [bounds[k], bounds[k+1])
  std::vector<std::int64_t> widths;  // d_k = d_embed / div_val^k for div_val > 1, d_embed otherwise

  std::int64_t n_clusters() const { return static_cast<std::int64_t>(widths.size()); }
  std::int64_t begin(std::int64_t k) const { return bounds.at(k); }
  std::int64_t end(std::int64_t k) const { return bounds.at(k + 1); }
  std::int64_t size(std::int64_t k) const { return end(k) - begin(k); }
};

// Validates the layout options and returns the clusters. Throws txl::Error naming `who`, the
// option and the value (cutoffs not strictly increasing inside (0, n_token), a cluster width that
// div_val rounds to zero, non-positive sizes).
AdaptiveLayout make_adaptive_layout(std::int64_t n_token, std::int64_t d_embed, std::int64_t d_proj,
                                    const std::vector<std::int64_t>& cutoffs, std::int64_t div_val,
                                    const std::string& who);

// Validates `init` (normal | uniform) and the two scales; throws txl::Error naming `who`.
void check_adaptive_init(const std::string& init, double init_std, double proj_init_std,
                         const std::string& who);

// Fills `weight` in place as the paper code's init_weight: normal(0, scale) for init = normal,
// uniform(-scale, scale) for init = uniform.
void adaptive_init_weight(torch::Tensor& weight, const std::string& init, double scale);

// Checks that `ids` is int64 (TORCH_CHECK) and that every id is in [0, n_token); otherwise throws
// txl::Error naming `who`, the first offending id, how many are bad and V. One host sync.
void check_token_ids(const torch::Tensor& ids, std::int64_t n_token, const std::string& who);

class AdaptiveEmbeddingImpl : public torch::nn::Module {
 public:
  explicit AdaptiveEmbeddingImpl(AdaptiveEmbeddingOptions options);

  // tokens: int64 [B, T] (any shape S) -> [B, T, d_proj] (S + [d_proj]), already multiplied by
  // sqrt(d_proj) (the paper code's emb_scale). The dtype is the tables' or, under autocast, the
  // projection's. Throws txl::Error on an id outside [0, n_token).
  torch::Tensor forward(const torch::Tensor& tokens);
  // The decoding step: the forward's lookup of tokens whose ids the caller has checked (a
  // decoder checks the prompt's; it generates only valid ones), without the host sync of the
  // check.
  torch::Tensor step(const torch::Tensor& tokens);

  const AdaptiveEmbeddingOptions& options() const { return options_; }
  const AdaptiveLayout& layout() const { return layout_; }

  // 1 when div_val = 1 (one table for the whole vocabulary), else one per cluster.
  std::int64_t num_tables() const { return static_cast<std::int64_t>(tables_.size()); }
  // The registered parameter emb_layers.k.weight: [V, d_embed] (div_val = 1) or [V_k, d_k].
  // The output layer ties to these very tensors.
  const torch::Tensor& table(std::int64_t k) const;
  // The registered parameter emb_projs.k, [d_proj, d_k] (maps a d_k row to d_proj as
  // torch::linear), or an undefined tensor when table k has none (div_val = 1 and
  // d_embed == d_proj).
  const torch::Tensor& projection(std::int64_t k) const;
  // sqrt(d_proj).
  double scale() const { return scale_; }

 private:
  torch::Tensor lookup(const torch::Tensor& tokens);  // forward after the check

  AdaptiveEmbeddingOptions options_;
  AdaptiveLayout layout_;
  double scale_;
  torch::nn::ModuleList emb_layers_;  // registered as emb_layers: Embedding per table
  std::shared_ptr<torch::nn::Module>
      emb_projs_;                      // registered as emb_projs: parameters "0", "1", ...
  std::vector<torch::Tensor> tables_;  // emb_layers.k.weight
  std::vector<torch::Tensor> projs_;   // emb_projs.k or undefined
};
TORCH_MODULE(AdaptiveEmbedding);

}  // namespace txl::modules
