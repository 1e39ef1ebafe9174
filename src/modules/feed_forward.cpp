#include "txl/modules/feed_forward.h"

#include "txl/util/error.h"

namespace txl::modules {

FeedForwardImpl::FeedForwardImpl(const FeedForwardOptions& options) {
  TXL_CHECK(options.d_model > 0 && options.d_inner > 0,
            "feed-forward: d_model and d_inner must be > 0, got ", options.d_model, " and ",
            options.d_inner);
  fc1 = register_module("fc1", torch::nn::Linear(options.d_model, options.d_inner));
  fc2 = register_module("fc2", torch::nn::Linear(options.d_inner, options.d_model));
  drop = register_module("drop", Dropout(options.dropout));
  reset_parameters(options.init);
}

void FeedForwardImpl::reset_parameters(const InitOptions& init) {
  init_linear(fc1, init);
  init_linear(fc2, init);
}

torch::Tensor FeedForwardImpl::forward(const torch::Tensor& x) {
  // relu_ in place: its backward needs only the output, so no second [..., d_inner] tensor.
  return fc2(drop(fc1(x).relu_()));  // [..., d_inner] -> [..., d]
}

}  // namespace txl::modules
