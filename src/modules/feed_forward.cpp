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

torch::Tensor FeedForwardImpl::apply(const torch::Tensor& x, const ops::Projection& first,
                                     const ops::Projection& second) {
  // relu in place: its backward needs only the output, so no second [..., d_inner] tensor.
  return second(drop(first(x, /*relu=*/true)));  // [..., d_inner] -> [..., d]
}

torch::Tensor FeedForwardImpl::forward(const torch::Tensor& x) {
  return apply(x, ops::Projection(fc1->weight, fc1->bias), ops::Projection(fc2->weight, fc2->bias));
}

FeedForwardStep FeedForwardImpl::prepare_step() const {
  return {ops::Projection::packed_for_decoding(fc1->weight, fc1->bias),
          ops::Projection::packed_for_decoding(fc2->weight, fc2->bias)};
}

torch::Tensor FeedForwardImpl::step(const FeedForwardStep& weights, const torch::Tensor& x) {
  return apply(x, weights.fc1, weights.fc2);  // [..., d]
}

}  // namespace txl::modules
