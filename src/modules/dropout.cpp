#include "txl/modules/dropout.h"

#include "txl/ops/dropout.h"
#include "txl/util/error.h"

namespace txl::modules {

DropoutImpl::DropoutImpl(double p) : p_(p) {
  TXL_CHECK(p >= 0.0 && p < 1.0, "dropout: p must be in [0, 1), got ", p);
}

torch::Tensor DropoutImpl::forward(const torch::Tensor& x) {
  return ops::dropout(x, p_, is_training());
}

}  // namespace txl::modules
