#pragma once
// bf16 mixed precision on CPU (and CUDA): an RAII guard that turns autocast on for its scope.
// Parameters stay fp32 (master weights); matrix products run in bf16. LibTorch renamed the
// autocast switches in 2.4; txl/util/compat.h hides the difference.

#include <torch/torch.h>

namespace txl {

class AutocastGuard {
 public:
  // Enables autocast to `dtype` on `device` when `enabled`; otherwise does nothing.
  AutocastGuard(bool enabled, torch::Device device, torch::ScalarType dtype = torch::kBFloat16);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool enabled_;
  bool cuda_;
  bool previous_;
};

// Whether autocast is on for `device`'s type in this thread, and the lower-precision dtype it casts
// to (for code that does by hand what autocast would do: custom autograd functions).
bool autocast_enabled(torch::Device device);
torch::ScalarType autocast_dtype(torch::Device device);

}  // namespace txl
