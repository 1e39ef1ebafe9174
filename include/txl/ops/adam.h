#pragma once
// Adam's update of one parameter: kernels::adam_update (one pass of txl's vector loops) where it
// takes the tensors. train::make_optimizer's Adam and AdamW step through it.

#include <torch/torch.h>

#include "txl/kernels/adam.h"

namespace txl::ops {

using AdamScalars = kernels::AdamScalars;

// Whether adam_update takes a parameter p with gradient g: both CPU float or double, of one
// dtype and shape, p contiguous and g not sparse (its moments are made contiguous by the caller).
bool adam_update_takes(const torch::Tensor& p, const torch::Tensor& g);

// One step in place on p and its moments (contiguous, p's shape and dtype); g is read (a
// non-contiguous g is copied first). Throws txl::Error where adam_update_takes is false.
void adam_update(torch::Tensor& p, const torch::Tensor& g, torch::Tensor& exp_avg,
                 torch::Tensor& exp_avg_sq, const AdamScalars& s);

}  // namespace txl::ops
