#include "txl/util/autocast.h"

#include <ATen/autocast_mode.h>

#include "txl/util/compat.h"

namespace txl {

AutocastGuard::AutocastGuard(bool enabled, torch::Device device, torch::ScalarType dtype)
    : enabled_(enabled), cuda_(device.is_cuda()), previous_(false) {
  if (!enabled_) return;
  previous_ = compat::autocast_is_enabled(cuda_);
  compat::autocast_set_dtype(cuda_, dtype);
  compat::autocast_set_enabled(cuda_, true);
}

AutocastGuard::~AutocastGuard() {
  if (!enabled_) return;
  compat::autocast_set_enabled(cuda_, previous_);
  // Cached bf16 copies of the weights must not outlive the scope (the weights change).
  if (!previous_) at::autocast::clear_cache();
}

bool autocast_enabled(torch::Device device) {
  return (device.is_cpu() || device.is_cuda()) && compat::autocast_is_enabled(device.is_cuda());
}

torch::ScalarType autocast_dtype(torch::Device device) {
  return compat::autocast_get_dtype(device.is_cuda());
}

}  // namespace txl
