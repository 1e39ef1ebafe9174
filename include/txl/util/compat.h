#pragma once
// The few places where LibTorch 1.13 and 2.x differ, in one header.

#include <torch/torch.h>

#include <sstream>
#include <string>
#include <type_traits>

namespace txl::compat {

// The key of a parameter's entry in torch::optim::Optimizer::state(): the parameter's
// TensorImpl address, spelled as a string in LibTorch 1.13 and as the pointer itself in later
// releases.
using OptimizerStateMap =
    std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>;
using OptimizerStateKey = typename OptimizerStateMap::key_type;

// (A template so that only the branch of the LibTorch at hand is compiled.)
template <typename Key = OptimizerStateKey>
Key optimizer_state_key(const torch::Tensor& parameter) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream out;
    out << parameter.unsafeGetTensorImpl();
    return out.str();
  } else {
    return static_cast<Key>(parameter.unsafeGetTensorImpl());
  }
}

}  // namespace txl::compat
