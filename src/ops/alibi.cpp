#include "txl/ops/alibi.h"

#include <cmath>
#include <vector>

#include "txl/util/error.h"

namespace txl::ops {

namespace {

// 2^(-8 h / n) for h = 1 .. n.
std::vector<double> geometric_slopes(int64_t n) {
  std::vector<double> slopes;
  for (int64_t h = 1; h <= n; ++h) slopes.push_back(std::pow(2.0, -8.0 * h / n));
  return slopes;
}

}  // namespace

torch::Tensor alibi_slopes(int64_t n_head, torch::ScalarType dtype, torch::Device device) {
  TXL_CHECK(n_head > 0, "alibi_slopes: n_head must be > 0, got ", n_head);
  int64_t power = 1;
  while (power * 2 <= n_head) power *= 2;
  auto slopes = geometric_slopes(power);
  const auto finer = geometric_slopes(2 * power);
  for (int64_t h = 0; static_cast<int64_t>(slopes.size()) < n_head; h += 2) {
    slopes.push_back(finer[h]);
  }
  return torch::tensor(slopes, torch::dtype(torch::kDouble)).to(device, dtype);  // [H]
}

}  // namespace txl::ops
