#include "txl/modules/adaptive_embedding.h"

#include <cmath>
#include <sstream>
#include <utility>

#include "txl/config/enums.h"
#include "txl/util/device_traffic.h"
#include "txl/util/error.h"

// Shapes: B batch, T tokens per row, N = B * T, d_proj model width, d_k width of table k,
// V vocabulary, V_k words in cluster k.

namespace txl::modules {

namespace {

std::string list_text(const std::vector<std::int64_t>& values) {
  std::ostringstream out;
  out << "[";
  for (std::size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << values[i];
  out << "]";
  return out.str();
}

}  // namespace

AdaptiveLayout make_adaptive_layout(std::int64_t n_token, std::int64_t d_embed, std::int64_t d_proj,
                                    const std::vector<std::int64_t>& cutoffs, std::int64_t div_val,
                                    const std::string& who) {
  TXL_CHECK(n_token > 0, who, ": n_token = ", n_token, " must be positive (the vocabulary size)");
  TXL_CHECK(d_embed > 0, who, ": d_embed = ", d_embed, " must be positive");
  TXL_CHECK(d_proj > 0, who, ": d_proj = ", d_proj, " must be positive");
  TXL_CHECK(div_val >= 1, who, ": div_val = ", div_val,
            " must be >= 1 (1 = all clusters d_embed wide)");
  AdaptiveLayout layout;
  layout.bounds.push_back(0);
  for (std::int64_t cutoff : cutoffs) {
    TXL_CHECK(cutoff > layout.bounds.back() && cutoff < n_token, who,
              ": cutoffs = ", list_text(cutoffs),
              " must be strictly increasing and each inside (0, n_token = ", n_token,
              "); the last cluster ends at n_token by itself, do not list it");
    layout.bounds.push_back(cutoff);
  }
  layout.bounds.push_back(n_token);
  std::int64_t divisor = 1;
  for (std::size_t k = 0; k + 1 < layout.bounds.size(); ++k) {
    const std::int64_t width = d_embed / divisor;
    TXL_CHECK(width >= 1, who, ": div_val = ", div_val, " leaves cluster ", k,
              " a width of d_embed / ", div_val, "^", k, " = 0 (d_embed = ", d_embed,
              "); use a smaller div_val, a larger d_embed or fewer cutoffs");
    layout.widths.push_back(width);
    divisor *= div_val;  // cannot overflow: divisor <= d_embed here, or the check above threw
  }
  return layout;
}

void check_adaptive_init(const std::string& init, double init_std, double proj_init_std,
                         const std::string& who) {
  TXL_CHECK(config::parse_enum<config::WeightInit>(init).has_value(), who, ": init = \"", init,
            "\" is not one of: normal, uniform");
  TXL_CHECK(std::isfinite(init_std) && init_std > 0, who, ": init_std = ", init_std,
            " must be positive");
  TXL_CHECK(std::isfinite(proj_init_std) && proj_init_std > 0, who,
            ": proj_init_std = ", proj_init_std, " must be positive");
}

void adaptive_init_weight(torch::Tensor& weight, const std::string& init, double scale) {
  torch::NoGradGuard no_grad;
  if (config::parse_enum<config::WeightInit>(init) == config::WeightInit::kUniform) {
    weight.uniform_(-scale, scale);
  } else {
    weight.normal_(0.0, scale);
  }
}

void check_token_ids(const torch::Tensor& ids, std::int64_t n_token, const std::string& who) {
  TORCH_CHECK(ids.scalar_type() == torch::kLong, who, ": token ids must be int64, got ",
              ids.scalar_type());
  // Only on the CPU, where reading the ids costs no device sync (on a GPU the embedding and
  // gather reject an out-of-range id themselves, with a device-side assert).
  if (ids.numel() == 0 || !ids.is_cpu()) return;
  TXL_HOST_ONLY_SCOPE();
  const torch::Tensor range = torch::stack({ids.min(), ids.max()});  // [2]
  const std::int64_t lowest = range[0].item<std::int64_t>();
  const std::int64_t highest = range[1].item<std::int64_t>();
  if (lowest >= 0 && highest < n_token) return;
  const torch::Tensor bad = (ids < 0).logical_or(ids >= n_token);  // S, bool
  const std::int64_t first = ids.masked_select(bad)[0].item<std::int64_t>();
  const std::int64_t count = bad.sum().item<std::int64_t>();
  TXL_FAIL(who, ": token id ", first, " is outside the vocabulary [0, ", n_token, ") (", count,
           " of ", ids.numel(),
           " ids out of range); the token ids and the model's n_token = ", n_token,
           " disagree: check that the tokenizer and the model config use the same vocabulary");
}

AdaptiveEmbeddingImpl::AdaptiveEmbeddingImpl(AdaptiveEmbeddingOptions options)
    : options_(std::move(options)),
      layout_(make_adaptive_layout(options_.n_token, options_.d_embed, options_.d_proj,
                                   options_.cutoffs, options_.div_val, "AdaptiveEmbedding")),
      scale_(std::sqrt(static_cast<double>(options_.d_proj))) {
  check_adaptive_init(options_.init, options_.init_std, options_.proj_init_std,
                      "AdaptiveEmbedding");
  emb_layers_ = register_module("emb_layers", torch::nn::ModuleList());
  emb_projs_ = register_module("emb_projs", std::make_shared<torch::nn::Module>());

  // div_val = 1: one table for the whole vocabulary (the paper code ignores the cutoffs on the
  // input side then); a projection only when the table is narrower or wider than the model.
  const bool single = options_.div_val == 1;
  const std::int64_t n_tables = single ? 1 : layout_.n_clusters();
  for (std::int64_t k = 0; k < n_tables; ++k) {
    const std::int64_t rows = single ? options_.n_token : layout_.size(k);
    const std::int64_t width = layout_.widths[k];
    torch::nn::Embedding table(torch::nn::EmbeddingOptions(rows, width));
    emb_layers_->push_back(table);
    adaptive_init_weight(table->weight, options_.init, options_.init_std);  // [V_k, d_k]
    tables_.push_back(table->weight);

    torch::Tensor proj;
    if (!single || width != options_.d_proj) {
      proj = emb_projs_->register_parameter(
          std::to_string(k), torch::empty({options_.d_proj, width}));  // [d_proj, d_k]
      torch::NoGradGuard no_grad;
      proj.normal_(0.0, options_.proj_init_std);
    }
    projs_.push_back(proj);
  }
}

const torch::Tensor& AdaptiveEmbeddingImpl::table(std::int64_t k) const {
  TORCH_CHECK(k >= 0 && k < num_tables(), "AdaptiveEmbedding::table: index ", k, " outside [0, ",
              num_tables(), ")");
  return tables_[k];
}

const torch::Tensor& AdaptiveEmbeddingImpl::projection(std::int64_t k) const {
  TORCH_CHECK(k >= 0 && k < num_tables(), "AdaptiveEmbedding::projection: index ", k,
              " outside [0, ", num_tables(), ")");
  return projs_[k];
}

torch::Tensor AdaptiveEmbeddingImpl::forward(const torch::Tensor& tokens) {
  check_token_ids(tokens, options_.n_token, "AdaptiveEmbedding");
  return lookup(tokens);
}

torch::Tensor AdaptiveEmbeddingImpl::step(const torch::Tensor& tokens) { return lookup(tokens); }

torch::Tensor AdaptiveEmbeddingImpl::lookup(const torch::Tensor& tokens) {
  torch::Tensor out;
  if (num_tables() == 1) {
    out = torch::embedding(tables_[0], tokens);                    // [B, T, d_0]
    if (projs_[0].defined()) out = torch::linear(out, projs_[0]);  // [B, T, d_proj]
  } else {
    // Each cluster looks up its own rows and projects them to d_proj; the rows are then put back
    // in token order. Only the clusters that occur are touched.
    const torch::Tensor flat = tokens.reshape({-1});  // [N]
    std::vector<std::pair<torch::Tensor, torch::Tensor>>
        parts;  // (positions [N_k], rows [N_k, d_proj])
    for (std::int64_t k = 0; k < num_tables(); ++k) {
      const torch::Tensor in_k =
          (flat >= layout_.begin(k)).logical_and(flat < layout_.end(k));  // [N]
      const torch::Tensor positions = in_k.nonzero().reshape({-1});       // [N_k]
      if (positions.numel() == 0) continue;
      const torch::Tensor local = flat.index_select(0, positions) - layout_.begin(k);  // [N_k]
      const torch::Tensor rows = torch::embedding(tables_[k], local);                  // [N_k, d_k]
      parts.emplace_back(positions, torch::linear(rows, projs_[k]));  // [N_k, d_proj]
    }
    // The projected rows' dtype, not the tables': under autocast the projection runs in bf16.
    const auto row_options = parts.empty() ? tables_[0].options() : parts.front().second.options();
    out = torch::empty({flat.size(0), options_.d_proj}, row_options);  // [N, d_proj]
    for (const auto& [positions, rows] : parts)
      out.index_copy_(0, positions, rows.to(out.scalar_type()));
    std::vector<std::int64_t> shape = tokens.sizes().vec();
    shape.push_back(options_.d_proj);
    out = out.view(shape);  // [B, T, d_proj]
  }
  // In place is safe: neither the lookup nor the projection needs its output for the backward.
  return out.mul_(scale_);  // [B, T, d_proj]
}

}  // namespace txl::modules
