#include "txl/util/autocast.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace txl {

namespace {

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool is_enabled(bool cuda) { return at::autocast::is_autocast_enabled(cuda ? at::kCUDA : at::kCPU); }
void set_enabled(bool cuda, bool on) { at::autocast::set_autocast_enabled(cuda ? at::kCUDA : at::kCPU, on); }
void set_dtype(bool cuda, at::ScalarType dtype) { at::autocast::set_autocast_dtype(cuda ? at::kCUDA : at::kCPU, dtype); }
at::ScalarType get_dtype(bool cuda) { return at::autocast::get_autocast_dtype(cuda ? at::kCUDA : at::kCPU); }
#else
bool is_enabled(bool cuda) { return cuda ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled(); }
void set_enabled(bool cuda, bool on) {
  if (cuda) at::autocast::set_enabled(on); else at::autocast::set_cpu_enabled(on);
}
void set_dtype(bool cuda, at::ScalarType dtype) {
  if (cuda) at::autocast::set_autocast_gpu_dtype(dtype); else at::autocast::set_autocast_cpu_dtype(dtype);
}
at::ScalarType get_dtype(bool cuda) {
  return cuda ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
}
#endif

}  // namespace

AutocastGuard::AutocastGuard(bool enabled, torch::Device device, torch::ScalarType dtype)
    : enabled_(enabled), cuda_(device.is_cuda()), previous_(false) {
  if (!enabled_) return;
  previous_ = is_enabled(cuda_);
  set_dtype(cuda_, dtype);
  set_enabled(cuda_, true);
}

AutocastGuard::~AutocastGuard() {
  if (!enabled_) return;
  set_enabled(cuda_, previous_);
  // Cached bf16 copies of the weights must not outlive the scope (the weights change).
  if (!previous_) at::autocast::clear_cache();
}

bool autocast_enabled(torch::Device device) {
  return (device.is_cpu() || device.is_cuda()) && is_enabled(device.is_cuda());
}

torch::ScalarType autocast_dtype(torch::Device device) { return get_dtype(device.is_cuda()); }

}  // namespace txl
