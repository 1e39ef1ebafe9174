#include "txl/util/device.h"

#include <ATen/Context.h>

#include "txl/util/error.h"

namespace txl {

torch::Device resolve_device(const std::string& name, int local_rank) {
  if (name == "cpu") return torch::Device(torch::kCPU);
  TXL_CHECK(name == "cuda" || name == "auto", "run.device: '", name,
            "' is not one of cpu | cuda | auto");
  const bool cuda = torch::cuda::is_available();
  if (!cuda) {
    TXL_CHECK(name == "auto", "run.device: cuda, but no CUDA GPU is available: either this "
              "LibTorch is CPU-only (build txl against a CUDA LibTorch through CMAKE_PREFIX_PATH) "
              "or no GPU is visible (driver, CUDA_VISIBLE_DEVICES); use run.device: cpu or auto");
    return torch::Device(torch::kCPU);
  }
  const auto count = static_cast<int>(torch::cuda::device_count());
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank % count));
}

at::Generator default_generator(const torch::Device& device) {
  return at::globalContext().defaultGenerator(device);
}

}  // namespace txl
