#pragma once
// The torch device of an experiment's run.device.

#include <torch/torch.h>

#include <string>

namespace txl {

// cpu -> CPU. cuda -> GPU local_rank (modulo the visible GPUs); a txl::Error naming the cause
// when this LibTorch has no CUDA or no GPU is visible. auto -> that GPU when one is visible,
// else CPU.
torch::Device resolve_device(const std::string& name, int local_rank = 0);

// The random generator that dropout on `device` draws from (the CPU generator or that GPU's):
// its state is what a checkpoint saves for an exact resume.
at::Generator default_generator(const torch::Device& device);

}  // namespace txl
