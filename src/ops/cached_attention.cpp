#include "txl/ops/cached_attention.h"

#include "txl/kernels/cached_attention.h"

namespace txl::ops {

bool attend_cached_takes(const torch::Tensor& like) { return kernels::attend_cached_takes(like); }

torch::Tensor attend_cached(const torch::Tensor& qkv, const CachedKeys& keys, int64_t k_len,
                            const std::vector<int64_t>& first) {
  kernels::CachedKeys cached;
  cached.buffer = keys.buffer;
  cached.by_distance = keys.by_distance;
  cached.u = keys.u;
  cached.v = keys.v;
  // [B, H D]
  return kernels::attend_cached(qkv, cached, k_len, first, kernels::CachedKernel::kBest);
}

}  // namespace txl::ops
