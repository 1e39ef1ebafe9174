#include "txl/models/flops.h"

#include "txl/models/memory_mechanism.h"
#include "txl/modules/position_scheme.h"
#include "txl/util/error.h"

namespace txl::models {

FlopsPerToken count_flops_per_token(const config::ModelConfig& c, int64_t vocab, int64_t tgt_len,
                                    int64_t mem_len, bool memory_kv_cached) {
  TXL_CHECK(vocab > 0 && tgt_len > 0 && mem_len >= 0, "count_flops_per_token: needs vocab > 0, ",
            "tgt_len > 0, mem_len >= 0, got ", vocab, ", ", tgt_len, ", ", mem_len);
  const double d = c.d_model, hd = static_cast<double>(c.n_head) * c.d_head, f = c.d_inner;
  // The keys and work the memory mechanisms add (compressive memory's rows and convolution).
  double extra_keys = 0, mechanisms = 0;
  for (const auto* mechanism : memory_mechanisms()) {
    if (!mechanism->used_by(c)) continue;
    extra_keys += static_cast<double>(mechanism->keys(c, mem_len));
    mechanisms += mechanism->flops_per_token(c, mem_len);
  }
  const double q = static_cast<double>(tgt_len), k = q + mem_len + extra_keys;
  // Products of queries with a position encoding per key, as the scheme says (turning queries
  // and keys, or adding a bias, is no product).
  const auto traits = modules::position_scheme(config::to_string(c.attn_type)).traits();
  const double position_products = traits.position_products;
  // Keys and values projected: every key row, or only the segment's when the memory's are cached.
  const double projected = memory_kv_cached && traits.caches_memory_kv ? q : k;
  double layer = 2 * d * hd                        // queries over the segment
                 + 2 * d * 2 * hd * projected / q  // keys and values
                 + 2 * hd * k                      // content scores
                 + position_products * 2 * hd * k  // position scores
                 + 2 * hd * k                      // weighted values
                 + 2 * hd * d                      // W_o
                 + 4 * d * f                       // feed-forward
                 + mechanisms;                     // the memory mechanisms' own
  double output = 0;
  if (c.cutoffs.empty()) {
    output = 2 * d * vocab;
  } else {
    std::vector<int64_t> bounds{0};
    bounds.insert(bounds.end(), c.cutoffs.begin(), c.cutoffs.end());
    bounds.push_back(vocab);
    const double n_tail = static_cast<double>(c.cutoffs.size());
    double width = d;
    for (size_t cluster = 0; cluster + 1 < bounds.size(); ++cluster) {
      const double words = static_cast<double>(bounds[cluster + 1] - bounds[cluster]);
      if (c.div_val > 1 || width != d) output += 2 * d * width;  // projection to d_k
      output += 2 * width * (words + (cluster == 0 ? n_tail : 0.0));
      if (c.div_val > 1) width = std::max(1.0, std::floor(width / c.div_val));
    }
    if (c.div_val > 1) output += 2 * d * d;  // adaptive input projection of the head
  }
  FlopsPerToken out;
  out.forward = c.n_layer * layer + output;
  out.training = 3 * out.forward;
  return out;
}

}  // namespace txl::models
