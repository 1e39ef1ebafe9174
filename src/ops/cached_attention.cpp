#include "txl/ops/cached_attention.h"

namespace txl::ops {

bool attend_cached_takes(const torch::Tensor& like) { return kernels::attend_cached_takes(like); }

torch::Tensor attend_cached(const torch::Tensor& qkv, const CachedKeys& keys, int64_t k_len,
                            const std::vector<int64_t>& first) {
  // [B, H D]
  return kernels::attend_cached(qkv, keys, k_len, first, kernels::CachedKernel::kBest);
}

}  // namespace txl::ops
