#include "txl/ops/rotary.h"

#include <cmath>

#include "txl/util/error.h"

namespace txl::ops {

torch::Tensor rotary_table(int64_t n, int64_t dim, torch::ScalarType dtype, torch::Device device) {
  TXL_CHECK(n >= 0, "rotary_table: n must be >= 0, got ", n);
  TXL_CHECK(dim > 0 && dim % 2 == 0, "rotary_table: the head size must be positive and even, got ",
            dim);
  const auto opts = torch::dtype(torch::kDouble).device(device);
  // theta^(-2k/D) = exp(-ln(theta) 2k/D), k = 0 .. D/2 - 1.
  const auto inv_freq = torch::exp(torch::arange(0, dim, 2, opts) * (-std::log(10000.0) / dim));
  const auto angles =
      torch::outer(torch::arange(n, opts), inv_freq).repeat_interleave(2, 1);  // [n, D]
  return torch::stack({angles.cos(), angles.sin()}).to(dtype);                 // [2, n, D]
}

torch::Tensor rotate(const torch::Tensor& x, const torch::Tensor& table, int64_t first) {
  const int64_t rows = x.size(-2), dim = x.size(-1);
  TXL_CHECK(table.dim() == 3 && table.size(0) == 2 && table.size(2) == dim && first >= 0 &&
                first + rows <= table.size(1),
            "rotate: positions ", first, " .. ", first + rows - 1, " of head size ", dim,
            " need a table [2, >= ", first + rows, ", ", dim, "], got ", table.sizes());
  const auto cos = table[0].narrow(0, first, rows);  // [L, D]
  const auto sin = table[1].narrow(0, first, rows);  // [L, D]
  auto pairs = x.unflatten(-1, {dim / 2, 2});        // [..., L, D/2, 2]
  const auto turned = torch::stack({pairs.select(-1, 1).neg(), pairs.select(-1, 0)}, -1)
                          .flatten(-2);  // [..., L, D]
  return x * cos + turned * sin;         // [..., L, D]
}

}  // namespace txl::ops
