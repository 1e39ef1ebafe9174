#include "txl/modules/positions.h"

#include "txl/util/device_traffic.h"
#include "txl/util/error.h"

namespace txl::modules {

LearnedPositionsImpl::LearnedPositionsImpl(int64_t n_positions, std::vector<int64_t> row_shape,
                                           const InitOptions& init) {
  TXL_CHECK(n_positions > 0, "learned positions: table size must be > 0, got ", n_positions);
  std::vector<int64_t> shape{n_positions};
  shape.insert(shape.end(), row_shape.begin(), row_shape.end());
  weight = register_parameter("weight", torch::empty(shape));
  reset_parameters(init);
}

void LearnedPositionsImpl::reset_parameters(const InitOptions& init) { init_weight(weight, init); }

torch::Tensor LearnedPositionsImpl::forward(const torch::Tensor& index) {
  TXL_CHECK(index.dim() == 1 && index.scalar_type() == torch::kLong,
            "learned positions: index must be int64 [L]");
  // A readable error for a bad index; only on the CPU, where it costs no device sync
  // (index_select itself rejects out-of-range indices on every device).
  if (index.numel() > 0 && index.is_cpu()) {
    TXL_HOST_ONLY_SCOPE();
    const int64_t top = index.max().item<int64_t>();
    TXL_CHECK(top < size() && index.min().item<int64_t>() >= 0, "learned positions: index ", top,
              " outside the table of ", size(), " rows");
  }
  return weight.index_select(0, index);
}

torch::Tensor LearnedPositionsImpl::first(int64_t n) {
  TXL_CHECK(n <= size(), "learned positions: ", n, " positions requested but the table has ",
            size(), " (raise model.max_positions or shorten tgt_len + mem_len)");
  return weight.narrow(0, 0, n);
}

}  // namespace txl::modules
