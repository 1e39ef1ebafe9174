#include "txl/ops/sinusoid.h"

#include "txl/util/error.h"

namespace txl::ops {

torch::Tensor sinusoid_encoding(const torch::Tensor& positions, int64_t dim) {
  TXL_CHECK(dim > 0 && dim % 2 == 0, "sinusoid_encoding: dim must be positive and even, got ", dim);
  TXL_CHECK(positions.dim() == 1, "sinusoid_encoding: positions must be 1-D [L], got ",
            positions.dim(), "-D");
  TXL_CHECK(positions.is_floating_point(),
            "sinusoid_encoding: positions must be float or double (encodings inherit the dtype)");
  auto opts = positions.options();
  // w_k = 10000^(-2k/dim), computed as exp(-ln(10000) 2k/dim).
  auto inv_freq =
      torch::exp(torch::arange(0, dim, 2, opts) * (-std::log(10000.0) / dim));  // [dim/2]
  auto angles = torch::outer(positions, inv_freq);                              // [L, dim/2]
  return torch::cat({torch::sin(angles), torch::cos(angles)}, /*dim=*/1);       // [L, dim]
}

torch::Tensor relative_distances(int64_t n_keys, int64_t clamp_len, torch::Device device) {
  TXL_CHECK(n_keys >= 0, "relative_distances: n_keys must be >= 0, got ", n_keys);
  TXL_CHECK(clamp_len >= -1, "relative_distances: clamp_len must be -1 (no clamp) or >= 0, got ",
            clamp_len);
  auto dist = torch::arange(n_keys - 1, -1, -1, torch::dtype(torch::kLong).device(device));  // [K]
  if (clamp_len >= 0) dist.clamp_max_(clamp_len);
  return dist;
}

}  // namespace txl::ops
