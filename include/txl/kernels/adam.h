#pragma once
// Adam's and AdamW's update of one parameter in one pass of txl's vector loops: read the
// parameter, its gradient and both moments once and write the parameter and the moments once.
// LibTorch's torch::optim::Adam makes about ten passes over each parameter (a tensor operation
// per term: mul_, add_, addcmul_, sqrt, div, add_, addcdiv_), each with its own call and
// temporary; over the default job's 41 parameters that is about 3% of a training step.
//
// The arithmetic is torch::optim::Adam's (AdamW's), term by term in the parameter's dtype with
// its scalars rounded to that dtype as LibTorch rounds them, without contracting a product and
// a sum into one rounding (fma): every CPU level gives the same bits.

#include "txl/kernels/tensor.h"

#include <cstdint>

namespace txl::kernels {

struct AdamScalars {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool decoupled = false;  // AdamW: p *= 1 - lr * weight_decay, instead of grad += weight_decay * p
  int64_t step = 1;        // the step being taken, from 1 (the bias corrections' power)
};

// One step of Adam (AdamW) in place on p, exp_avg and exp_avg_sq, with gradient g: all four of
// one shape, contiguous, CPU float or double (vector_loops_take), of one dtype. Throws
// txl::Error for what it does not take. Large parameters are split between threads.
void adam_update(at::Tensor& p, const at::Tensor& g, at::Tensor& exp_avg, at::Tensor& exp_avg_sq,
                 const AdamScalars& s);

}  // namespace txl::kernels
