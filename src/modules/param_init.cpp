#include "txl/modules/param_init.h"

#include "txl/config/enums.h"
#include "txl/util/error.h"

namespace txl::modules {

void init_weight(torch::Tensor weight, const InitOptions& options) {
  torch::NoGradGuard no_grad;
  // The name through model.init's table (config/enums.h), the one spelling of its values.
  const auto init = config::parse_enum<config::WeightInit>(options.init);
  TXL_CHECK(init.has_value(), "model.init: unknown value \"", options.init,
            "\" (allowed: normal, uniform)");
  if (*init == config::WeightInit::kUniform) {
    weight.uniform_(-options.std, options.std);
  } else {
    weight.normal_(0.0, options.std);
  }
}

void init_layer_norm(torch::nn::LayerNorm& norm, const InitOptions& options) {
  torch::NoGradGuard no_grad;
  const auto norm_init = config::parse_enum<config::NormInit>(options.norm_init);
  TXL_CHECK(norm_init.has_value(), "model.norm_init: unknown value \"", options.norm_init,
            "\" (allowed: normal, ones)");
  if (*norm_init == config::NormInit::kOnes) {
    norm->weight.fill_(1.0);
  } else {
    norm->weight.normal_(1.0, options.std);
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
