#include "txl/generation/incremental.h"

#include <algorithm>

#include "txl/ops/masks.h"
#include "txl/ops/projection.h"
#include "txl/util/error.h"

namespace txl::generation {

DecoderWeights prepare_decoder(models::TransformerLM model, const DecodeOptions& options) {
  TXL_CHECK(options.tgt_len >= 1, "decoding: tgt_len = ", options.tgt_len, " must be >= 1");
  TXL_CHECK(options.mem_len >= 0, "decoding: mem_len = ", options.mem_len, " must be >= 0");
  TXL_CHECK(options.clamp_len >= -1, "decoding: clamp_len = ", options.clamp_len,
            " must be -1 (no clamp) or >= 0");
  TXL_CHECK(!model->is_training(), "decoding: the model must be in evaluation mode (eval())");
  torch::NoGradGuard no_grad;
  DecoderWeights w;
  w.model = model;
  w.options = options;
  w.segments = !model->decodes_by_step(options.mem_len);
  const auto& like = model->crit->table(0);
  if (w.segments) {  // buffers of one segment and what the mechanisms put before it
    w.zero_memory = options.zero_memory && options.mem_len > 0;
    w.capacity =
        model->segment_capacity(segment_lookback(model, options, w.zero_memory), options.tgt_len);
    w.slots = torch::arange(w.capacity, torch::dtype(torch::kLong).device(like.device()));  // [C]
    w.first_slots = model->layer_list().front()->attn->steps_by_first_slot(like);
    w.step = model->prepare_step(w.capacity, options.clamp_len, false);
    return w;
  }
  w.sliding = model->position_scheme().traits().absolute || options.mem_len == 0;
  w.capacity = w.sliding ? options.tgt_len : options.mem_len + 2 * options.tgt_len;
  w.zero_memory = options.zero_memory && !w.sliding;
  w.slots = torch::arange(w.capacity, torch::dtype(torch::kLong).device(like.device()));  // [C]
  w.first_slots = !w.sliding && model->layer_list().front()->attn->steps_by_first_slot(like);
  w.step = model->prepare_step(w.capacity, options.clamp_len, w.zero_memory);
  return w;
}

IncrementalDecoder::IncrementalDecoder(models::TransformerLM model, const DecodeOptions& options,
                                       int64_t rows)
    : IncrementalDecoder(prepare_decoder(std::move(model), options), rows) {}

IncrementalDecoder::IncrementalDecoder(const DecoderWeights& weights, int64_t rows) : w_(weights) {
  TXL_CHECK(w_.model, "decoding: the weights are not prepared (prepare_decoder)");
  TXL_CHECK(rows >= 1, "decoding: rows = ", rows, " must be >= 1");
  TXL_CHECK(!w_.model->is_training(), "decoding: the model must be in evaluation mode (eval())");
  torch::NoGradGuard no_grad;
  first_.assign(static_cast<size_t>(rows), 0);
  if (w_.segments) return;  // the groups' buffers come with the first read
  kv_ = key_value_buffers(rows);
  for (auto& kv : kv_) kv.zero_();  // mmap's blocks come zeroed, torch::empty's do not
  if (w_.zero_memory) {
    // The mem_len slots before time 0 hold the zero memory of every row.
    const int64_t m = w_.options.mem_len;
    w_.model->write_zero_memory(w_.step, kv_, m);
    base_ = -m;
    used_ = m;
  }
  softmax_ = modules::AdaptiveLogSoftmaxImpl::for_rows(w_.step.softmax, rows);  // rows never grow
}

std::vector<torch::Tensor> IncrementalDecoder::key_value_buffers(int64_t rows) const {
  const auto& c = w_.model->config();
  const auto layers = static_cast<int64_t>(w_.step.layers.size());
  const auto opts = w_.model->crit->table(0).options();
  auto all = ops::empty_streamed({layers, 2, c.n_head, rows, w_.capacity, c.d_head},
                                 opts);  // [L, 2, H, B, C, D]
  std::vector<torch::Tensor> buffers;
  for (int64_t l = 0; l < layers; ++l) buffers.push_back(all[l]);  // [2, H, B, C, D], contiguous
  return buffers;
}

std::vector<torch::Tensor> IncrementalDecoder::copied_buffers(
    const std::vector<torch::Tensor>& kv) const {
  if (kv.empty()) return {};
  auto out = key_value_buffers(kv.front().size(2));
  for (size_t l = 0; l < kv.size(); ++l) out[l].copy_(kv[l]);  // [2, H, B, C, D]
  return out;
}

void IncrementalDecoder::start_rows(const torch::Tensor& real, int64_t t_len) {
  if (!real.defined()) return;
  TXL_CHECK(real.dim() == 2 && real.size(0) == rows() && real.size(1) == t_len &&
                real.scalar_type() == torch::kBool,
            "decoding: real must be bool [B = ", rows(), ", T = ", t_len, "], got ", real.sizes(),
            " ", real.scalar_type());
  auto host = real.to(torch::kCPU).contiguous();
  const auto a = host.accessor<bool, 2>();
  for (int64_t b = 0; b < rows(); ++b) {
    int64_t lead = 0;
    while (lead < t_len && !a[b][lead]) ++lead;
    for (int64_t t = lead; t < t_len; ++t) {
      TXL_CHECK(a[b][t], "decoding: row ", b, " has padding at ", t, " after its first token at ",
                lead, "; padding goes before a row's first token");
    }
    TXL_CHECK(lead == 0 || time_ == 0, "decoding: row ", b,
              " has padding in a later read; padding goes in the first read only");
    if (time_ == 0) first_[static_cast<size_t>(b)] = lead;
  }
}

int64_t IncrementalDecoder::first_visible(size_t b, int64_t t) const {
  const int64_t first = first_[b];
  if (w_.sliding) return std::max(first, base_);  // the window is all there is
  // Padding sees only itself: its output is never read, and one key keeps every query's
  // first slot inside the keys it is read against (ops::attend_cached checks it).
  if (t < first) return t;
  // With zero memory the mem_len slots before the row's first token are its memory.
  const int64_t earliest = w_.zero_memory ? first - w_.options.mem_len : first;
  if (w_.options.same_length) return std::max(earliest, t - w_.options.mem_len + 1);
  // Segments of tgt_len from the row's first token; the memory is the mem_len before its own.
  const int64_t segment_start = first + (t - first) / w_.options.tgt_len * w_.options.tgt_len;
  return std::max(earliest, segment_start - w_.options.mem_len);
}

std::vector<int64_t> IncrementalDecoder::first_slots(int64_t q) const {
  std::vector<int64_t> slots;
  slots.reserve(static_cast<size_t>(rows() * q));
  for (int64_t b = 0; b < rows(); ++b) {
    for (int64_t i = 0; i < q; ++i) {
      const int64_t first = first_visible(static_cast<size_t>(b), time_ + i);
      TXL_CHECK(first >= base_ || first >= time_ + i, "decoding: internal error: key at time ",
                first, " left the buffer (starts at ", base_, ")");
      slots.push_back(first - base_);
    }
  }
  return slots;
}

torch::Tensor IncrementalDecoder::score_bias(int64_t q) const {
  const int64_t batch = rows(), k_len = used_ + q;
  auto lowest = torch::tensor(first_slots(q), torch::kLong).view({batch, q});  // [B, q], host
  const auto device = w_.slots.device();
  auto slots = w_.slots.narrow(0, 0, k_len);              // [K]
  auto blocked = slots < lowest.to(device).unsqueeze(2);  // [B, q, K]
  if (q > 1) {
    auto query_slot = slots.narrow(0, used_, q).view({1, q, 1});           // [1, q, 1]
    blocked = blocked.logical_or(slots.view({1, 1, k_len}) > query_slot);  // [B, q, K]
  }
  return ops::score_bias(blocked, kv_.front().scalar_type());  // [B, q, K]
}

std::vector<int64_t> IncrementalDecoder::zero_slots(int64_t q) const {
  std::vector<int64_t> n;
  for (int64_t b = 0; b < rows(); ++b) {
    const int64_t end = std::min(first_[static_cast<size_t>(b)], time_ + q);  // padding ends
    n.push_back(std::max<int64_t>(0, end - time_));
  }
  return n;
}

void IncrementalDecoder::make_room(int64_t q) {
  if (used_ + q <= w_.capacity) return;
  // A later query sees at most mem_len + tgt_len - 1 earlier keys.
  const int64_t keep = std::min(used_, w_.options.mem_len + w_.options.tgt_len - 1);
  for (auto& kv : kv_) {
    auto recent = kv.narrow(3, used_ - keep, keep).clone();  // [2, H, B, keep, D]
    kv.narrow(3, 0, keep).copy_(recent);
  }
  base_ += used_ - keep;
  used_ = keep;
}

torch::Tensor IncrementalDecoder::run_chunk(const torch::Tensor& tokens,
                                            const torch::Tensor& positions) {
  const int64_t q = tokens.size(1);
  modules::StepMask mask;
  if (w_.first_slots && q == 1) {
    mask.first = first_slots(1);
  } else {
    mask.bias = score_bias(q);  // [B, q, K]
  }
  if (w_.zero_memory) mask.zero_slots = zero_slots(q);
  auto last = w_.model->step(w_.step, tokens, positions, kv_, used_, mask);  // [B, d]
  used_ += q;
  time_ += q;
  return last;
}

torch::Tensor IncrementalDecoder::read_sliding(const torch::Tensor& tokens) {
  const int64_t window = w_.options.tgt_len;
  window_ = window_.defined() ? torch::cat({window_, tokens}, 1) : tokens;  // [B, n + T]
  const int64_t n = std::min<int64_t>(window_.size(1), window);
  window_ = window_.narrow(1, window_.size(1) - n, n);  // [B, n]: the last tokens
  time_ += tokens.size(1) - n;                          // run_chunk reads the window's n
  base_ = time_;
  used_ = 0;
  torch::Tensor positions;  // int64 [B, n]: positions from the row's first token in the window
  if (w_.model->position_scheme().traits().absolute) {
    positions = torch::empty({rows(), n}, torch::kLong);
    auto* p = positions.data_ptr<int64_t>();
    for (int64_t b = 0; b < rows(); ++b) {
      const int64_t start = std::max(first_[static_cast<size_t>(b)], base_);
      for (int64_t j = 0; j < n; ++j) p[b * n + j] = std::max<int64_t>(0, base_ + j - start);
    }
    positions = positions.to(w_.slots.device());
  }
  return w_.model->step_log_prob(softmax_, run_chunk(window_, positions));  // [B, V]
}

torch::Tensor IncrementalDecoder::read(const torch::Tensor& tokens, const torch::Tensor& real) {
  TXL_CHECK(tokens.defined() && tokens.dim() == 2 && tokens.scalar_type() == torch::kLong &&
                tokens.size(0) == rows() && tokens.size(1) >= 1,
            "decoding: tokens must be int64 [B = ", rows(), ", T >= 1], got ",
            tokens.defined() ? tokens.sizes() : torch::IntArrayRef{});
  torch::NoGradGuard no_grad;
  const int64_t t_len = tokens.size(1);
  start_rows(real, t_len);
  // A clear message for a bad id (the lookup itself would also refuse it).
  if (time_ == 0) modules::check_token_ids(tokens, w_.model->n_token(), "decoding");
  const auto on_device = tokens.to(w_.slots.device());
  if (w_.segments) return read_segments(on_device);
  if (w_.sliding) return read_sliding(on_device);
  torch::Tensor last;  // [B, d]
  for (int64_t begin = 0; begin < t_len; begin += w_.options.tgt_len) {
    const int64_t q = std::min(w_.options.tgt_len, t_len - begin);
    make_room(q);
    last = run_chunk(on_device.narrow(1, begin, q), {});
  }
  return w_.model->step_log_prob(softmax_, last);  // [B, V]
}

void IncrementalDecoder::keep_rows(const torch::Tensor& rows) {
  TXL_CHECK(
      rows.defined() && rows.dim() == 1 && rows.scalar_type() == torch::kLong && rows.size(0) >= 1,
      "decoding: keep_rows takes int64 [B'] with B' >= 1");
  auto host = rows.to(torch::kCPU).contiguous();
  const auto* p = host.data_ptr<int64_t>();
  std::vector<int64_t> first;
  for (int64_t i = 0; i < host.size(0); ++i) {
    TXL_CHECK(p[i] >= 0 && p[i] < this->rows() && (i == 0 || p[i] > p[i - 1]),
              "decoding: keep_rows: indices must increase within [0, ", this->rows(), ")");
    first.push_back(first_[static_cast<size_t>(p[i])]);
  }
  if (w_.segments) {
    keep_group_rows(std::vector<int64_t>(p, p + host.size(0)));
    first_ = std::move(first);
    return;
  }
  const auto index = host.to(w_.slots.device());
  auto kept = key_value_buffers(host.size(0));  // per layer [2, H, B', C, D]
  for (size_t l = 0; l < kv_.size(); ++l) torch::index_select_out(kept[l], kv_[l], 2, index);
  kv_ = std::move(kept);
  if (window_.defined()) window_ = window_.index_select(0, index);  // [B', n]
  first_ = std::move(first);
}

IncrementalDecoder IncrementalDecoder::clone() const {
  torch::NoGradGuard no_grad;
  IncrementalDecoder copy(*this);  // shares the tensors, which reads replace (window_, memory)
  if (w_.segments) {
    for (auto& g : copy.groups_) g.kv = copied_buffers(g.kv);  // [2, H, B_g, C, D]
    return copy;
  }
  copy.kv_ = copied_buffers(kv_);  // [2, H, B, C, D]
  return copy;
}

namespace {

void check_stack(const std::vector<IncrementalDecoder>& parts) {
  TXL_CHECK(!parts.empty(), "decoding: stack needs at least one decoder");
  const auto& first = parts.front().weights();
  for (const auto& p : parts) {
    const auto& w = p.weights();
    TXL_CHECK(w.model.ptr() == first.model.ptr() && w.capacity == first.capacity &&
                  w.options.tgt_len == first.options.tgt_len &&
                  w.options.mem_len == first.options.mem_len &&
                  w.options.clamp_len == first.options.clamp_len &&
                  w.options.same_length == first.options.same_length &&
                  w.zero_memory == first.zero_memory,
              "decoding: stack takes decoders of one model and one set of lengths");
    TXL_CHECK(!p.sliding(),
              "decoding: stack takes memory decoders (a sliding window reads its "
              "last tokens again instead)");
    TXL_CHECK(p.steps() > 0, "decoding: stack takes decoders that have read a token");
  }
}

}  // namespace

IncrementalDecoder IncrementalDecoder::stack(const std::vector<IncrementalDecoder>& parts) {
  check_stack(parts);
  torch::NoGradGuard no_grad;
  int64_t rows = 0, time = 0, used = 0;
  for (const auto& p : parts) {
    rows += p.rows();
    time = std::max(time, p.time_);
    used = std::max(used, p.used_);
  }
  IncrementalDecoder merged(parts.front().w_, rows);  // zeroed buffers
  merged.time_ = time;
  if (merged.w_.segments) {  // the parts' groups, their rows renumbered and their starts aligned
    merged.first_.clear();
    int64_t b = 0;
    for (const auto& p : parts) {
      const int64_t offset = time - p.time_;
      for (auto g : p.groups_) {
        for (auto& row : g.rows) row += b;
        g.first += offset;
        g.kv = merged.copied_buffers(g.kv);  // [2, H, B_g, C, D]
        merged.groups_.push_back(std::move(g));
      }
      for (const auto first : p.first_) merged.first_.push_back(first + offset);
      b += p.rows();
    }
    merged.merge_groups();
    return merged;
  }
  merged.used_ = used;
  merged.base_ = time - used;
  int64_t b = 0;
  for (const auto& p : parts) {
    // A part behind by `offset` steps: its slot s at the stack's slot s + used - p.used_ (the
    // same time), and its rows start `offset` later, as if left-padded.
    const int64_t offset = time - p.time_;
    for (size_t l = 0; l < merged.kv_.size(); ++l) {
      merged.kv_[l]
          .narrow(2, b, p.rows())
          .narrow(3, used - p.used_, p.used_)
          .copy_(p.kv_[l].narrow(3, 0, p.used_));  // [2, H, B_p, K_p, D]
    }
    for (int64_t j = 0; j < p.rows(); ++j) {
      merged.first_[static_cast<size_t>(b + j)] = p.first_[static_cast<size_t>(j)] + offset;
    }
    b += p.rows();
  }
  return merged;
}

}  // namespace txl::generation
