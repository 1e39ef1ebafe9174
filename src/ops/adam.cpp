#include "txl/ops/adam.h"

#include "txl/kernels/vector_loops.h"
#include "txl/util/error.h"

namespace txl::ops {

bool adam_update_takes(const torch::Tensor& p, const torch::Tensor& g) {
  return kernels::vector_loops_take(p) && kernels::vector_loops_take(g) && p.is_contiguous() &&
         g.scalar_type() == p.scalar_type() && g.sizes() == p.sizes();
}

void adam_update(torch::Tensor& p, const torch::Tensor& g, torch::Tensor& exp_avg,
                 torch::Tensor& exp_avg_sq, const AdamScalars& s) {
  TXL_CHECK(adam_update_takes(p, g), "adam_update: a parameter ", p.scalar_type(), " ", p.sizes(),
            " on ", p.device(), " with a gradient ", g.scalar_type(), " ", g.sizes(),
            " is not taken (contiguous CPU float or double of one shape)");
  kernels::adam_update(p, g.contiguous(), exp_avg, exp_avg_sq, s);
}

}  // namespace txl::ops
