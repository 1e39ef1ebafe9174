#include "txl/util/device.h"

#include "support/test_support.h"

namespace {

TEST(DefaultGenerator, SavingAndRestoringItsStateRepeatsTheDraws) {
  for (const auto& device : {torch::Device(torch::kCPU), torch::Device(torch::kCUDA, 0)}) {
    if (device.is_cuda() && !torch::cuda::is_available()) continue;
    auto generator = txl::default_generator(device);
    torch::Tensor state;
    {
      std::lock_guard<std::mutex> lock(generator.mutex());
      state = generator.get_state();
    }
    auto first = torch::rand({8}, torch::TensorOptions().device(device));
    {
      std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_state(state);
    }
    auto again = torch::rand({8}, torch::TensorOptions().device(device));
    EXPECT_TRUE(txl::test::tensor_equal(first.cpu(), again.cpu())) << device;
  }
}

}  // namespace
