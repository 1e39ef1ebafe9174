// Decoding a segment a few tokens at a time over the mechanisms' rows (SegmentSteps): the
// forward's start, its masks and its layers' keys, written into a decoder's buffers.
#include <numeric>

#include "txl/models/transformer_lm.h"
#include "txl/ops/masks.h"
#include "txl/util/error.h"

namespace txl::models {

namespace {

// Per row and query i of allowed bool [B, Q, lead + Q] (host): the first slot it sees when it
// sees every slot from there to its own (lead + i), else -1.
std::vector<int64_t> contiguous_firsts(const torch::Tensor& allowed, int64_t lead) {
  const auto a = allowed.accessor<bool, 3>();
  std::vector<int64_t> first;
  first.reserve(static_cast<size_t>(allowed.size(0) * allowed.size(1)));
  for (int64_t b = 0; b < allowed.size(0); ++b) {
    for (int64_t i = 0; i < allowed.size(1); ++i) {
      const int64_t self = lead + i;
      int64_t f = 0;
      while (f <= self && !a[b][i][f]) ++f;
      int64_t j = f;
      while (j <= self && a[b][i][j]) ++j;
      first.push_back(f <= self && j == self + 1 ? f : -1);
    }
  }
  return first;
}

}  // namespace

int64_t TransformerLMImpl::segment_capacity(const Lookback& ctx, int64_t q_len) {
  torch::NoGradGuard no_grad;
  const Memory none;
  const auto device = word_emb->table(0).device();
  auto s = open_segment(none, ctx, 1, q_len, {}, {}, device);
  auto x = torch::empty({1, 0, config_.d_model}, s.options);
  for (const auto& part : mechanism_parts_) x = part->surround(x, s);
  int64_t group = 1;
  for (const auto& part : mechanism_parts_) group = std::lcm(group, part->eviction_group(ctx));
  int64_t prefix = 0;  // the keys the mechanisms put before the memory
  for (const auto* mechanism : mechanisms_) prefix += mechanism->keys(config_, ctx.mem_len);
  return prefix + ctx.mem_len + group - 1 + s.before + q_len;
}

SegmentSteps TransformerLMImpl::begin_segment(const LMStep& weights, const Memory& memory,
                                              const Lookback& ctx, int64_t batch, int64_t q_len,
                                              const std::vector<torch::Tensor>& kv,
                                              bool first_slots) {
  torch::NoGradGuard no_grad;
  TXL_CHECK(!is_training(), "decoding: the model must be in evaluation mode (eval())");
  TXL_CHECK(kv.size() == layer_list_.size(), "decoding: buffers of ", kv.size(),
            " layers, the model has ", layer_list_.size());
  const auto device = kv.front().device();
  Inputs probe;  // the forward's checks of the memory and the lookback
  probe.tokens = torch::zeros({batch, q_len}, torch::dtype(torch::kLong).device(device));
  check_inputs(probe, memory, ctx);
  auto s = open_segment(memory, ctx, batch, q_len, {}, {}, device);
  auto x = torch::empty({batch, 0, config_.d_model}, s.options);
  for (const auto& part : mechanism_parts_) x = part->surround(x, s);  // [B, before + after, d]
  const int64_t m_len = s.memory.length();
  const int64_t n_len = s.prefix_keys.defined() ? s.prefix_keys.size(1) : 0;
  const int64_t rows = n_len + m_len, lead = rows + s.before, capacity = kv.front().size(3);
  TXL_CHECK(lead + q_len <= capacity, "decoding: a segment needs ", lead + q_len,
            " slots, the buffers hold ", capacity);
  auto allowed = segment_visibility(q_len, m_len, s.key_mask, ctx, device, s.prefix_keys);
  if (allowed.dim() == 2) allowed = allowed.unsqueeze(0);
  allowed = allowed.expand({batch, allowed.size(1), allowed.size(2)});  // [B, Q', K']
  std::vector<modules::ContextHook> contexts;  // per layer, as the forward's
  for (size_t l = 0; l < layer_list_.size(); ++l) contexts.push_back(layer_context(s, l));
  // The layers' rows before the segment: their keys and values, as the forward projects them.
  for (size_t l = 0; l < layer_list_.size(); ++l) {
    torch::Tensor before;  // [B, N + M, d]
    for (const auto& part : mechanism_parts_) {
      before = part->layer_memory(s, l, before, x.scalar_type());
    }
    if (!before.defined()) continue;
    TXL_CHECK(before.size(1) == rows, "decoding: internal error: layer ", l, " reads ",
              before.size(1), " rows before the segment, expected ", rows);
    layer_list_[l]->write_keys(weights.layers[l], before, kv[l].narrow(3, 0, rows));
  }
  if (s.before > 0) {  // the rows the mechanisms put before the segment, through the layers
    modules::StepMask mask;
    mask.bias = ops::score_bias(allowed.narrow(1, 0, s.before).narrow(2, 0, lead).logical_not(),
                                kv.front().scalar_type());  // [B, before, lead]
    step_layers(weights, x.narrow(1, 0, s.before), kv, rows, mask, {}, contexts);
  }
  SegmentSteps out;
  out.contexts = std::move(contexts);
  out.lead = lead;
  out.q_len = q_len;
  const auto queries = allowed.narrow(1, s.before, q_len);  // [B, Q, K']
  // A step's query reads the slots up to its own: the forward's must see no later key.
  const auto later = torch::ones({q_len, allowed.size(2)}, queries.options()).triu(lead + 1);
  TXL_CHECK(!queries.logical_and(later).any().item<bool>(),
            "decoding: a query of the segment sees a later key; its mechanisms cannot decode "
            "step by step");
  const auto segment = queries.narrow(2, 0, lead + q_len);
  out.blocked = segment.logical_not().contiguous();  // [B, Q, lead + Q]
  if (first_slots) out.first = contiguous_firsts(segment.to(torch::kCPU).contiguous(), lead);
  return out;
}

}  // namespace txl::models
