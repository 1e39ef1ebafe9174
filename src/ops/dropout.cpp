#include "txl/ops/dropout.h"

#include "txl/util/random.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>
#include <mutex>
#include <type_traits>

namespace txl::ops {

namespace {

std::uint64_t draw_seed() {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return at::check_generator<at::CPUGeneratorImpl>(generator)->random64();
}

// noise [numel]: keep_value where the element's 32 bits are below threshold, else 0. Elements
// 2 j and 2 j + 1 use the low and high halves of hash(seed + j golden): the work is split by
// pairs, so the mask is the same whatever the threads.
template <typename scalar_t>
void fill_noise(scalar_t* noise, std::int64_t numel, std::uint64_t seed, std::uint64_t threshold,
                scalar_t keep_value) {
  constexpr std::int64_t kGrainPairs = 1 << 14;
  const scalar_t zero(0);
  at::parallel_for(0, (numel + 1) / 2, kGrainPairs, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t j = begin; j < end; ++j) {
      const std::uint64_t bits = splitmix64(seed + static_cast<std::uint64_t>(j) * kGoldenGamma);
      noise[2 * j] = (bits & 0xFFFFFFFFULL) < threshold ? keep_value : zero;
      if (2 * j + 1 < numel) noise[2 * j + 1] = (bits >> 32) < threshold ? keep_value : zero;
    }
  });
}

}  // namespace

torch::Tensor dropout(const torch::Tensor& x, double p, bool training) {
  TORCH_CHECK(p >= 0.0 && p <= 1.0, "dropout: p must be in [0, 1], got ", p);
  if (!training || p == 0.0) return x;
  if (p == 1.0) return x * torch::zeros({}, x.options());
  if (!x.device().is_cpu()) return torch::dropout(x, p, true);
  TORCH_CHECK(x.is_floating_point(), "dropout: x must be floating point, got ", x.scalar_type());
  const double keep = 1.0 - p;
  const auto threshold = static_cast<std::uint64_t>(std::ldexp(keep, 32));  // [0, 2^32)
  const std::uint64_t seed = draw_seed();
  torch::Tensor noise =
      torch::empty(x.sizes(), x.options().memory_format(torch::MemoryFormat::Contiguous));
  AT_DISPATCH_FLOATING_TYPES_AND2(
      torch::kBFloat16, torch::kHalf, x.scalar_type(), "txl::ops::dropout", [&] {
        // The keep value of torch::dropout's noise.div_(1 - p): computed in float for float and
        // narrower dtypes, in double for double, then stored in x's dtype.
        const auto keep_value = std::is_same<scalar_t, double>::value
                                    ? static_cast<scalar_t>(1.0 / keep)
                                    : static_cast<scalar_t>(1.0f / static_cast<float>(keep));
        fill_noise<scalar_t>(noise.data_ptr<scalar_t>(), noise.numel(), seed, threshold,
                             keep_value);
      });
  return x * noise;
}

}  // namespace txl::ops
