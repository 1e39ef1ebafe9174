#pragma once
// The torch device of an experiment's run.device: the one place a config::Device becomes a
// torch::Device.

#include <torch/torch.h>

#include "txl/config/enums.h"

namespace txl::config {

// kCpu -> CPU. kCuda -> GPU local_rank (modulo the visible GPUs); a txl::Error naming the cause
// when this LibTorch has no CUDA or no GPU is visible. kAuto -> that GPU when one is visible,
// else CPU.
torch::Device resolve_device(Device device, int local_rank = 0);

}  // namespace txl::config
