#include "txl/modules/compressor.h"

#include <limits>
#include <optional>

#include "txl/config/enums.h"
#include "txl/util/error.h"

namespace txl::modules {

namespace {

// model.cmem_compress's value through its name table (config/enums.h).
std::optional<config::Compression> compression(const CompressorOptions& options) {
  return config::parse_enum<config::Compression>(options.kind);
}

}  // namespace

CompressorImpl::CompressorImpl(const CompressorOptions& options) : options_(options) {
  TXL_CHECK(options.rate >= 1, "model.cmem_rate = ", options.rate, " must be >= 1");
  TXL_CHECK(compression(options).has_value(), "model.cmem_compress: unknown value \"", options.kind,
            "\" (allowed: conv, mean, max)");
  if (compression(options) != config::Compression::kConv) return;
  const int64_t d = options.d_model, c = options.rate;
  conv = register_module("conv",
                         torch::nn::Conv1d(torch::nn::Conv1dOptions(d, d, c).stride(c).bias(true)));
  // Mean pooling to start with: tap k of output channel o reads input channel o with 1/c.
  torch::NoGradGuard no_grad;
  conv->weight.copy_(torch::eye(d).unsqueeze(2).expand({d, d, c}) / static_cast<double>(c));
  conv->bias.zero_();
}

std::pair<torch::Tensor, torch::Tensor> CompressorImpl::forward(const torch::Tensor& rows,
                                                                const torch::Tensor& mask) {
  const int64_t batch = rows.size(0), n = rows.size(1), d = rows.size(2), c = options_.rate;
  TXL_CHECK(n % c == 0, "compressive memory: ", n, " rows do not make whole groups of ", c);
  const int64_t groups = n / c;
  const auto real = mask.view({batch, groups, c});                           // [B, G, c]
  const auto group_mask = real.any(2);                                       // [B, G]
  const auto zeroed = rows.masked_fill(mask.logical_not().unsqueeze(2), 0);  // [B, G c, d]
  if (trains()) {
    auto out = conv(zeroed.transpose(1, 2)).transpose(1, 2);  // [B, d, G c] -> [B, G, d]
    return {out, group_mask};
  }
  const auto grouped = zeroed.view({batch, groups, c, d});  // [B, G, c, d]
  if (compression(options_) == config::Compression::kMean) {
    const auto count = real.sum(2, /*keepdim=*/true).clamp_min(1).to(rows.scalar_type());
    return {grouped.sum(2) / count, group_mask};  // [B, G, d]
  }
  const auto lowest = -std::numeric_limits<float>::infinity();
  const auto maxed = grouped.masked_fill(real.logical_not().unsqueeze(3), lowest).amax(2);
  return {maxed.masked_fill(group_mask.logical_not().unsqueeze(2), 0), group_mask};  // [B, G, d]
}

}  // namespace txl::modules
