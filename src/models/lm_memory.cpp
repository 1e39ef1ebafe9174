// How the model carries its memory from segment to segment (docs/model.md section 3): the
// memory written after a segment (update_memory, compress_evicted), a stream's start (reset rows
// emptied or zeroed), which memory keys are real, and the recurrent memory tokens read and
// written. The forward (transformer_lm.cpp) calls these.
#include <algorithm>

#include "txl/models/transformer_lm.h"
#include "txl/util/error.h"

namespace txl::models {

Memory TransformerLMImpl::update_memory(const Memory& memory,
                                        const std::vector<torch::Tensor>& hiddens,
                                        const std::vector<torch::Tensor>& kv,
                                        const torch::Tensor& key_mask,
                                        const torch::Tensor& compressed_keys, int64_t q_len,
                                        const Lookback& ctx, torch::Tensor* aux_loss) {
  Memory next;
  if (ctx.mem_len == 0) return next;
  const int64_t m_len = memory.length();
  // Paper code: the memory ends ext_len positions before the segment's end and keeps at most
  // mem_len positions of concat(old memory, segment). Compressive memory: positions leave in
  // whole groups of cmem_rate, so that up to cmem_rate - 1 more stay until their group is full.
  const int64_t end = m_len + std::max<int64_t>(0, q_len - ctx.ext_len);
  int64_t begin = std::max<int64_t>(0, end - ctx.mem_len);
  if (ctx.cmem_len > 0) begin -= begin % config_.cmem_rate;
  const int64_t length = end - begin;
  {
    // Paper 3.2: the memory takes no part in the backward pass (stop-gradient), unless the
    // caller back-propagates through segments (Lookback::memory_grad).
    std::optional<torch::NoGradGuard> no_grad;
    if (!ctx.memory_grad) no_grad.emplace();
    for (size_t l = 0; l < hiddens.size(); ++l) {
      torch::Tensor kept;  // [B, length, d]
      if (begin >= m_len) {
        kept = hiddens[l].narrow(1, begin - m_len, length);  // a view: no copy
      } else {
        kept = torch::cat({memory.layers[l].narrow(1, begin, m_len - begin),
                           hiddens[l].narrow(1, 0, end - m_len)},
                          1);
      }
      next.layers.push_back(ctx.memory_grad ? kept : kept.detach());
      // Keys and values cover every position of concat(memory, segment): the same window.
      if (!kv.empty()) next.kv.push_back(kv[l].narrow(3, begin, length));  // [2, H, B, length, D]
    }
  }
  next.key_mask = key_mask.narrow(1, begin, length);  // [B, length]
  if (ctx.cmem_len > 0) {
    compress_evicted(memory, hiddens, key_mask, compressed_keys, begin, q_len, ctx, next, aux_loss);
  }
  return next;
}

void TransformerLMImpl::compress_evicted(const Memory& memory,
                                         const std::vector<torch::Tensor>& hiddens,
                                         const torch::Tensor& key_mask,
                                         const torch::Tensor& compressed_keys, int64_t evicted,
                                         int64_t q_len, const Lookback& ctx, Memory& next,
                                         torch::Tensor* aux_loss) {
  const int64_t m_len = memory.length(), n_len = memory.compressed_length();
  const bool with_loss = aux_loss != nullptr && is_training() && torch::GradMode::is_enabled() &&
                         compressor_list_.front()->trains() && config_.cmem_loss_weight > 0;
  if (evicted == 0 && n_len == 0) return;                    // nothing compressed yet
  const auto old_mask = key_mask.narrow(1, 0, evicted);      // [B, E]
  const auto query_mask = key_mask.narrow(1, m_len, q_len);  // [B, Q]
  torch::Tensor loss_sum, made_mask;  // made_mask [B, E / c]: the same in every layer
  for (size_t l = 0; l < hiddens.size(); ++l) {
    // The rows that left: positions [0, E) of concat(memory, segment), as constants.
    torch::Tensor old;  // [B, E, d]
    if (evicted <= m_len) {
      old = memory.layers[l].narrow(1, 0, evicted);
    } else if (m_len == 0) {  // a memory shorter than the segment: rows of the segment leave
      old = hiddens[l].narrow(1, 0, evicted);
    } else {
      old = torch::cat({memory.layers[l], hiddens[l].narrow(1, 0, evicted - m_len)}, 1);
    }
    old = old.detach();
    torch::Tensor rows = n_len > 0 ? memory.compressed[l] : torch::Tensor();  // [B, N, d]
    if (evicted > 0) {
      std::optional<torch::NoGradGuard> no_grad;
      if (!with_loss) no_grad.emplace();
      auto [made, mask] = compressor_list_[l](old, old_mask);  // [B, E / c, d], [B, E / c]
      if (with_loss) {
        auto loss =
            layer_list_[l]->reconstruction_loss(hiddens[l], old, old_mask, made, mask, query_mask);
        loss_sum = loss_sum.defined() ? loss_sum + loss : loss;
      }
      made = made.detach().to(hiddens[l].scalar_type());
      rows = rows.defined() ? torch::cat({rows.to(made.scalar_type()), made}, 1) : made;
      made_mask = mask;
    }
    const int64_t keep = std::min<int64_t>(ctx.cmem_len, rows.size(1));
    next.compressed.push_back(rows.narrow(1, rows.size(1) - keep, keep));  // [B, N', d]
  }
  const auto all_mask = !made_mask.defined() ? compressed_keys
                        : n_len > 0          ? torch::cat({compressed_keys, made_mask}, 1)
                                             : made_mask;  // [B, N + E / c]
  const int64_t keep = next.compressed.front().size(1);
  next.compressed_mask = all_mask.narrow(1, all_mask.size(1) - keep, keep);  // [B, N']
  if (loss_sum.defined()) {
    *aux_loss = loss_sum * (config_.cmem_loss_weight / static_cast<double>(hiddens.size()));
  }
}

namespace {

// `t` on `device`: itself when it is there already (no call to count as a move, see
// util/device_traffic.h), else a copy.
torch::Tensor on(const torch::Tensor& t, const torch::Device& device) {
  return t.device() == device ? t : t.to(device);
}

}  // namespace

Memory TransformerLMImpl::zero_started(const Memory& memory, const torch::Tensor& reset,
                                       int64_t batch, const Lookback& ctx,
                                       const torch::TensorOptions& options) const {
  if (memory.layers.empty()) {
    Memory zeros;
    for (int64_t l = 0; l < config_.n_layer; ++l) {
      zeros.layers.push_back(
          torch::zeros({batch, ctx.mem_len, config_.d_model}, options));  // [B, M, d]
    }
    zeros.key_mask = torch::ones({batch, ctx.mem_len}, options.dtype(torch::kBool));  // [B, M]
    return zeros;
  }
  if (!reset.defined() || !reset.any().item<bool>()) return memory;
  Memory restarted;  // the reset rows start from zeros again, all of them visible
  const auto rows = on(reset, options.device());  // [B]
  for (const auto& layer : memory.layers) {
    restarted.layers.push_back(layer.masked_fill(rows.view({-1, 1, 1}), 0));  // [B, M, d]
  }
  const auto keys = memory.key_mask.defined() ? on(memory.key_mask, options.device())
                                              : torch::ones({batch, memory.length()},
                                                            options.dtype(torch::kBool));  // [B, M]
  restarted.key_mask = keys.logical_or(rows.unsqueeze(1));                                 // [B, M]
  // A reset row's compressed memory is forgotten: its rows are hidden, not zeroed into view.
  restarted.compressed = memory.compressed;
  if (!memory.compressed.empty()) {
    restarted.compressed_mask =
        on(memory.compressed_mask, options.device()).logical_and(rows.logical_not().unsqueeze(1));
  }
  return restarted;  // without cached keys and values: the zeroed rows' are projected anew
}

std::pair<torch::Tensor, torch::Tensor> TransformerLMImpl::real_keys(
    const Memory& memory, const torch::Tensor& reset, const torch::Tensor& input_mask,
    int64_t batch, int64_t q_len, torch::Device device) const {
  const int64_t m_len = memory.length();
  auto bool_opts = torch::dtype(torch::kBool).device(device);
  auto memory_keys = m_len == 0                  ? torch::empty({batch, 0}, bool_opts)
                     : memory.key_mask.defined() ? on(memory.key_mask, device)
                                                 : torch::ones({batch, m_len}, bool_opts);
  if (reset.defined() && m_len > 0) {
    memory_keys = memory_keys.logical_and(on(reset, device).logical_not().unsqueeze(1));
  }
  auto segment_keys = input_mask.defined() ? input_mask : torch::ones({batch, q_len}, bool_opts);
  auto key_mask = torch::cat({memory_keys, segment_keys}, 1);  // [B, M + Q]
  torch::Tensor compressed_keys;                               // [B, N]
  if (memory.compressed_length() > 0) {
    compressed_keys = on(memory.compressed_mask, device);
    if (reset.defined()) {
      compressed_keys = compressed_keys.logical_and(on(reset, device).logical_not().unsqueeze(1));
    }
  }
  return {key_mask, compressed_keys};
}

torch::Tensor TransformerLMImpl::read_tokens(const Memory& memory, const torch::Tensor& reset,
                                             const torch::Tensor& like) const {
  const int64_t batch = like.size(0);
  auto read = memory_read_emb.to(like.scalar_type())
                  .unsqueeze(0)
                  .expand({batch, config_.mem_tokens, config_.d_model});  // [B, m, d]
  if (!memory.tokens.defined()) return read;
  auto carried = memory.tokens.to(like.scalar_type());  // [B, m, d]
  if (reset.defined()) carried = carried.masked_fill(on(reset, like.device()).view({-1, 1, 1}), 0);
  return read + carried;
}

torch::Tensor TransformerLMImpl::write_tokens(const torch::Tensor& like) const {
  return memory_write_emb.to(like.scalar_type())
      .unsqueeze(0)
      .expand({like.size(0), config_.mem_tokens, config_.d_model});  // [B, m, d]
}

}  // namespace txl::models
