#pragma once
// The few places where LibTorch 1.13 and 2.x differ, in one header.

#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <sstream>
#include <string>
#include <type_traits>

namespace txl::compat {

// The key of a parameter's entry in torch::optim::Optimizer::state(): the parameter's
// TensorImpl address, spelled as a string in LibTorch 1.13 and as the pointer itself in later
// releases.
using OptimizerStateMap = std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>;
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

// Autocast's per-thread switches for CPU or CUDA: LibTorch 2.4 replaced the cpu_/gpu_ functions by
// ones that take the device type.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
inline at::DeviceType autocast_device(bool cuda) { return cuda ? at::kCUDA : at::kCPU; }
inline bool autocast_is_enabled(bool cuda) {
  return at::autocast::is_autocast_enabled(autocast_device(cuda));
}
inline void autocast_set_enabled(bool cuda, bool on) {
  at::autocast::set_autocast_enabled(autocast_device(cuda), on);
}
inline void autocast_set_dtype(bool cuda, at::ScalarType dtype) {
  at::autocast::set_autocast_dtype(autocast_device(cuda), dtype);
}
inline at::ScalarType autocast_get_dtype(bool cuda) {
  return at::autocast::get_autocast_dtype(autocast_device(cuda));
}
#else
inline bool autocast_is_enabled(bool cuda) {
  return cuda ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
}
inline void autocast_set_enabled(bool cuda, bool on) {
  if (cuda) {
    at::autocast::set_enabled(on);
  } else {
    at::autocast::set_cpu_enabled(on);
  }
}
inline void autocast_set_dtype(bool cuda, at::ScalarType dtype) {
  if (cuda) {
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
}
inline at::ScalarType autocast_get_dtype(bool cuda) {
  return cuda ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
}
#endif

}  // namespace txl::compat
