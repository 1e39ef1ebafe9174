#pragma once
// Helpers shared by the adaptive softmax tests: a vocabulary layout, the embedding and softmax
// options it makes, parameters redrawn or looked up by name, and targets covering every id.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "txl/modules/adaptive_embedding.h"
#include "txl/modules/adaptive_softmax.h"

namespace txl::modules::adaptive_softmax_test {

struct Layout {
  std::int64_t n_token, d_embed, d_proj;
  std::vector<std::int64_t> cutoffs;
  std::int64_t div_val;
};

inline std::string describe(const Layout& l) {
  std::string text = "V " + std::to_string(l.n_token) + ", d_embed " + std::to_string(l.d_embed) +
                     ", d_proj " + std::to_string(l.d_proj) + ", div_val " +
                     std::to_string(l.div_val) + ", cutoffs [";
  for (auto c : l.cutoffs) text += std::to_string(c) + " ";
  return text + "]";
}

inline AdaptiveEmbedding make_embedding(const Layout& l) {
  AdaptiveEmbeddingOptions o;
  o.n_token = l.n_token;
  o.d_embed = l.d_embed;
  o.d_proj = l.d_proj;
  o.cutoffs = l.cutoffs;
  o.div_val = l.div_val;
  return AdaptiveEmbedding(o);
}

inline AdaptiveSoftmaxOptions softmax_options(const Layout& l, bool tie_weight = true,
                                              bool tie_projs = true) {
  AdaptiveSoftmaxOptions o;
  o.n_token = l.n_token;
  o.d_embed = l.d_embed;
  o.d_proj = l.d_proj;
  o.cutoffs = l.cutoffs;
  o.div_val = l.div_val;
  o.tie_weight = tie_weight;
  o.tie_projs = tie_projs;
  return o;
}

// Redraws every parameter with a large scale, biases included, so that every softmax is far from
// uniform: a mixed-up cluster column or projection then changes the numbers.
inline void randomize(torch::nn::Module& module, double scale) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters()) p.normal_(0.0, scale);
}

inline torch::Tensor param(const torch::nn::Module& module, const std::string& name) {
  const auto* found = module.named_parameters().find(name);
  if (found == nullptr) throw std::runtime_error("no parameter " + name);
  return *found;
}

// Every id once, then random ones: [V + extra].
inline torch::Tensor all_targets(std::int64_t n_token, std::int64_t extra) {
  return torch::cat(
      {torch::arange(n_token, torch::kLong), torch::randint(n_token, {extra}, torch::kLong)});
}

}  // namespace txl::modules::adaptive_softmax_test
