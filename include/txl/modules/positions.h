#pragma once
// Learned position tables: Shaw et al. (2018) relative embeddings per clipped distance
// ([max_rel_dist + 1, H, D]) and Al-Rfou et al. (2018) absolute embeddings per position
// ([max_positions, d]). The sinusoid encodings need no parameters: see txl/ops/sinusoid.h.

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "txl/modules/param_init.h"

namespace txl::modules {

class LearnedPositionsImpl : public torch::nn::Module {
 public:
  // A table of `n_positions` rows, each of shape `row_shape` (e.g. {H, D} or {d}).
  LearnedPositionsImpl(int64_t n_positions, std::vector<int64_t> row_shape,
                       const InitOptions& init);

  // Rows for the given indices (int64 [L]): [L, row_shape...]. Throws txl::Error naming the
  // largest index when one is outside the table.
  torch::Tensor forward(const torch::Tensor& index);

  // The first n rows, [n, row_shape...] (a view): absolute positions 0..n-1.
  torch::Tensor first(int64_t n);

  int64_t size() const { return weight.size(0); }
  void reset_parameters(const InitOptions& init);

  torch::Tensor weight;  // [n_positions, row_shape...]
};
TORCH_MODULE(LearnedPositions);

}  // namespace txl::modules
