#pragma once
// Compressive memory's own module (src/models/memory/compressive.cpp, the mechanism): the
// compression function of Rae et al. 2020, section 3.1: groups of c consecutive memory rows ->
// one compressed row, per layer.
//   conv  a strided 1-D convolution (kernel c, stride c, d -> d channels, with bias): each
//         compressed row is an affine map of its group's c rows. It starts as mean pooling and
//         trains only by the attention-reconstruction loss (docs/model.md).
//   mean  the mean of the group's real rows (no parameters)
//   max   the element-wise maximum of the group's real rows (no parameters)
// Padding rows (mask false) are zeros to the convolution and left out of the pooling; a
// compressed row is real when its group has at least one real row.
//
// Legend: B rows, G groups, c rate, d model width.

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>

namespace txl::models::memory {

struct CompressorOptions {
  int64_t d_model = 256;      // d
  int64_t rate = 4;           // c
  std::string kind = "conv";  // conv | mean | max
};

class CompressorImpl : public torch::nn::Module {
 public:
  // Throws txl::Error for rate < 1 or an unknown kind.
  explicit CompressorImpl(const CompressorOptions& options);

  // rows [B, G c, d] with mask bool [B, G c] (true = real) -> compressed [B, G, d] and its
  // mask bool [B, G]. Throws txl::Error when the length is not a multiple of c.
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& rows,
                                                  const torch::Tensor& mask);

  // Whether it has parameters (conv): only then is there a reconstruction loss to train.
  bool trains() const { return !conv.is_empty(); }
  const CompressorOptions& options() const { return options_; }

  torch::nn::Conv1d conv{nullptr};  // conv only: weight [d, d, c], bias [d]

 private:
  CompressorOptions options_;
};
TORCH_MODULE(Compressor);

}  // namespace txl::models::memory
