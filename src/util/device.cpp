#include "txl/util/device.h"

#include <ATen/Context.h>

namespace txl {

at::Generator default_generator(const torch::Device& device) {
  return at::globalContext().defaultGenerator(device);
}

}  // namespace txl
