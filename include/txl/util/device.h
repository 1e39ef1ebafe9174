#pragma once
// The random generator a device draws from.

#include <torch/torch.h>

namespace txl {

// The random generator that dropout on `device` draws from (the CPU generator or that GPU's):
// its state is what a checkpoint saves for an exact resume.
at::Generator default_generator(const torch::Device& device);

}  // namespace txl
