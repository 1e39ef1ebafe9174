#include "txl/config/device.h"

#include "txl/util/error.h"

namespace txl::config {

torch::Device resolve_device(Device device, int local_rank) {
  if (device == Device::kCpu) return torch::Device(torch::kCPU);
  // Only a value cast from a number is neither: the loader takes names from the table alone.
  TXL_CHECK(device == Device::kCuda || device == Device::kAuto, "run.device: '", to_string(device),
            "' is not one of ", enum_choices<Device>());
  if (!torch::cuda::is_available()) {
    TXL_CHECK(device == Device::kAuto,
              "run.device: cuda, but no CUDA GPU is available: either this "
              "LibTorch is CPU-only (build txl against a CUDA LibTorch through CMAKE_PREFIX_PATH) "
              "or no GPU is visible (driver, CUDA_VISIBLE_DEVICES); use run.device: cpu or auto");
    return torch::Device(torch::kCPU);
  }
  const auto count = static_cast<int>(torch::cuda::device_count());
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank % count));
}

}  // namespace txl::config
