#include "txl/modules/param_init.h"

#include "txl/util/error.h"

namespace txl::modules {

void init_weight(torch::Tensor weight, const InitOptions& options) {
  torch::NoGradGuard no_grad;
  if (options.init == "normal") {
    weight.normal_(0.0, options.std);
  } else if (options.init == "uniform") {
    weight.uniform_(-options.std, options.std);
  } else {
    TXL_FAIL("model.init: unknown value \"", options.init, "\" (allowed: normal, uniform)");
  }
}

void init_layer_norm(torch::nn::LayerNorm& norm, const InitOptions& options) {
  torch::NoGradGuard no_grad;
  if (options.norm_init == "normal") {
    norm->weight.normal_(1.0, options.std);
  } else if (options.norm_init == "ones") {
    norm->weight.fill_(1.0);
  } else {
    TXL_FAIL("model.norm_init: unknown value \"", options.norm_init, "\" (allowed: normal, ones)");
  }
  norm->bias.zero_();
}

void init_linear(torch::nn::Linear& linear, const InitOptions& options) {
  init_weight(linear->weight, options);
  if (linear->bias.defined()) {
    torch::NoGradGuard no_grad;
    linear->bias.zero_();
  }
}

}  // namespace txl::modules
