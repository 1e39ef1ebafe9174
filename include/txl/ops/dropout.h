#pragma once
// Dropout with a fast mask generator (docs/model.md section 5: residual, inner and attention
// dropout).
//
// The same function as torch::dropout: in training each element is zeroed with probability p and
// the others are scaled by 1 / (1 - p), out = x * noise with noise in x's dtype, and the gradient
// is grad * noise. Only the random numbers differ: LibTorch's CPU bernoulli_ draws one Mersenne
// Twister number per element in a serial loop (on CPUs without its MKL path), about a tenth of a
// bf16 training step of the bench model. Here one 64-bit seed is drawn from the default CPU
// generator (so torch::manual_seed and a saved generator state reproduce the masks) and a
// counter-based hash (splitmix64) of (seed, element index) gives 32 random bits per element:
// element i is kept when its bits are below (1 - p) 2^32. The mask does not depend on the number
// of threads. Tensors on other devices go to torch::dropout.

#include <torch/torch.h>

namespace txl::ops {

// x any shape and floating dtype; p in [0, 1]. Returns x itself when !training or p == 0.
torch::Tensor dropout(const torch::Tensor& x, double p, bool training);

}  // namespace txl::ops
