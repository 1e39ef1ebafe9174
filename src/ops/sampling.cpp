#include "txl/ops/sampling.h"

#include <limits>

#include "txl/kernels/row_reductions.h"
#include "txl/kernels/vector_loops.h"
#include "txl/util/error.h"

namespace txl::ops {

namespace {

void check_scores(const torch::Tensor& scores, const char* what) {
  TXL_CHECK(
      scores.defined() && scores.dim() == 2 && scores.size(1) > 0 && scores.is_floating_point(),
      what, ": scores must be a floating [B, V] with V > 0");
}

}  // namespace

torch::Tensor top_k_filter(const torch::Tensor& scores, int64_t k) {
  check_scores(scores, "top_k_filter");
  if (k <= 0 || k >= scores.size(1)) return scores;
  auto kth = std::get<0>(scores.topk(k, -1)).narrow(1, k - 1, 1);                     // [B, 1]
  return scores.masked_fill(scores < kth, -std::numeric_limits<double>::infinity());  // [B, V]
}

torch::Tensor top_p_filter(const torch::Tensor& scores, double p) {
  check_scores(scores, "top_p_filter");
  TXL_CHECK(p > 0, "top-p must be in (0, 1], got ", p);
  if (p >= 1) return scores;
  auto [sorted, order] = scores.sort(-1, /*descending=*/true);  // [B, V] each
  auto probs = torch::softmax(sorted.to(torch::kDouble), -1);   // [B, V]
  auto mass_before = probs.cumsum(-1) - probs;                  // [B, V]
  // The mass is read back from log-probabilities: 1e-12 absorbs their rounding, so that a set
  // of mass exactly p counts as reaching p.
  auto dropped_sorted = mass_before >= p - 1e-12;                                      // [B, V]
  auto dropped = torch::zeros_like(dropped_sorted).scatter(1, order, dropped_sorted);  // [B, V]
  return scores.masked_fill(dropped, -std::numeric_limits<double>::infinity());        // [B, V]
}

torch::Tensor draw(const torch::Tensor& scores, const torch::Tensor& uniforms) {
  check_scores(scores, "draw");
  TXL_CHECK(uniforms.dim() == 1 && uniforms.size(0) == scores.size(0),
            "draw: uniforms must be [B = ", scores.size(0), "], got ", uniforms.sizes());
  const int64_t vocab = scores.size(1);
  auto probs = torch::softmax(scores.to(torch::kDouble), -1);  // [B, V]
  auto cumulative = probs.cumsum(-1);                          // [B, V]
  auto target = (uniforms.to(probs.options()) * cumulative.narrow(1, vocab - 1, 1).squeeze(1))
                    .unsqueeze(1);  // [B, 1]
  auto index = torch::searchsorted(cumulative, target, /*out_int32=*/false, /*right=*/true)
                   .clamp_max_(vocab - 1);  // [B, 1]
  // Rounding can land a target on the total (the flat end of the row): take the row's most
  // probable entry rather than one of probability 0.
  auto valid = probs.gather(1, index) > 0;                                // [B, 1]
  index = torch::where(valid, index, probs.argmax(1, /*keepdim=*/true));  // [B, 1]
  return index.squeeze(1);                                                // [B]
}

torch::Tensor argmax_rows(const torch::Tensor& x) {
  TXL_CHECK(x.defined() && x.dim() == 2 && x.size(1) >= 1, "argmax_rows: x must be [B, V >= 1]");
  if (!kernels::vector_loops_take(x) || !x.is_contiguous()) return x.argmax(1);  // [B]
  return kernels::argmax_rows(x);                                                // [B]
}

}  // namespace txl::ops
