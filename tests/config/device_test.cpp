#include "txl/config/device.h"

#include "support/test_support.h"

namespace {

using txl::config::Device;
using txl::config::resolve_device;

TEST(ResolveDevice, CpuAutoAndCuda) {
  EXPECT_TRUE(resolve_device(Device::kCpu).is_cpu());
  TXL_EXPECT_THROW_WITH(resolve_device(static_cast<Device>(7)),
                        "run.device: '7' is not one of cpu | cuda | auto");
  if (torch::cuda::is_available()) {
    const auto n = static_cast<int>(torch::cuda::device_count());
    EXPECT_TRUE(resolve_device(Device::kAuto).is_cuda());
    EXPECT_EQ(resolve_device(Device::kCuda, n + 1).index(), (n + 1) % n);  // local rank -> GPU
  } else {
    EXPECT_TRUE(resolve_device(Device::kAuto).is_cpu());
    TXL_EXPECT_THROW_WITH(resolve_device(Device::kCuda), "no CUDA GPU is available");
  }
}

}  // namespace
