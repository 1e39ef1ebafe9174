#pragma once
// Attention parts that several position schemes share (private to src/modules/positions/).

#include <memory>
#include <utility>

#include "txl/modules/position_scheme.h"

namespace txl::modules::positions {

// Scores of the content alone, q . k / sqrt(D): the attention's part of absolute positions
// (added to the input, not to the scores).
std::unique_ptr<AttentionPositions> content_attention();

// The attention's part of schemes whose position term is a query product with an encoding per
// distance (Transformer-XL's, Shaw's): the scheme gives the encodings of the inputs' distances and
// optionally biases u, v of the content and position terms; scores, decoding tables and the
// fused kernel's encodings by distance are written once here.
class ByDistanceAttention : public AttentionPositions {
 public:
  torch::Tensor scores(const torch::Tensor& q, const torch::Tensor& k, const PositionInputs& in,
                       double scale) override;
  PositionStep prepare_step(const PositionInputs& slots, int64_t clamp_len, double scale) override;
  torch::Tensor step_scores(const PositionStep& w, const torch::Tensor& q, const torch::Tensor& k,
                            int64_t used) const override;

 protected:
  // The encodings [H, D, K] of the distances K-1 .. 0 that `in` holds for K keys.
  virtual torch::Tensor encodings(const PositionInputs& in, int64_t k_len) = 0;
  // The biases u (content) and v (position) [H, D]; undefined = none.
  virtual std::pair<torch::Tensor, torch::Tensor> biases(const PositionInputs& /*in*/) const {
    return {};
  }
};

}  // namespace txl::modules::positions
