// IncrementalDecoder's segment mode (see incremental.h): groups of rows that share their
// segments, each segment begun by the model over the memory its earlier segments' forwards left.
#include <algorithm>
#include <map>

#include "txl/generation/incremental.h"
#include "txl/ops/masks.h"
#include "txl/util/error.h"

namespace txl::generation {

models::Lookback segment_lookback(const models::TransformerLM& model, const DecodeOptions& options,
                                  bool zero_memory) {
  models::Lookback ctx = model->default_lookback();
  ctx.mem_len = options.mem_len;
  ctx.clamp_len = options.clamp_len;
  ctx.same_length = options.same_length;
  ctx.ext_len = 0;
  ctx.zero_memory = zero_memory;
  return ctx;
}

namespace {

// Whether a segment's hooks hold data of its rows (a kNN store): its rows cannot be cut or joined
// without beginning it again.
bool holds_rows(const models::SegmentSteps& s) {
  return std::any_of(s.contexts.begin(), s.contexts.end(),
                     [](const auto& c) { return static_cast<bool>(c); });
}

}  // namespace

IncrementalDecoder::Group IncrementalDecoder::new_group(std::vector<int64_t> rows,
                                                        int64_t first) const {
  Group g;
  g.rows = std::move(rows);
  g.first = first;
  g.kv = key_value_buffers(static_cast<int64_t>(g.rows.size()));
  for (auto& kv : g.kv) kv.zero_();
  g.softmax = modules::AdaptiveLogSoftmaxImpl::for_rows(w_.step.softmax,
                                                        static_cast<int64_t>(g.rows.size()));
  return g;
}

void IncrementalDecoder::make_groups() {
  std::map<int64_t, std::vector<int64_t>> by_first;
  for (int64_t b = 0; b < rows(); ++b) by_first[first_[static_cast<size_t>(b)]].push_back(b);
  for (auto& [first, rows] : by_first) groups_.push_back(new_group(std::move(rows), first));
}

torch::Tensor IncrementalDecoder::read_segments(const torch::Tensor& tokens) {
  if (groups_.empty()) make_groups();
  const int64_t t_len = tokens.size(1);
  for (const auto& g : groups_) {
    TXL_CHECK(g.last.defined() || g.first < time_ + t_len, "decoding: row ", g.rows.front(),
              " has no token in its first read (padding only); every row needs one");
  }
  for (auto& g : groups_) {
    const int64_t from = std::max<int64_t>(0, g.first - time_);
    if (from >= t_len) continue;  // their first token comes later
    const bool all = static_cast<int64_t>(g.rows.size()) == rows();
    const auto mine =
        all ? tokens
            : tokens.index_select(0, torch::tensor(g.rows, torch::kLong).to(tokens.device()));
    read_group(g, mine.narrow(1, from, t_len - from));  // [B_g, n]
  }
  time_ += t_len;
  if (groups_.size() == 1) {
    return groups_.front().last;  // [B, V]
  }
  torch::Tensor out;  // [B, V]
  for (const auto& g : groups_) {
    if (!out.defined()) out = torch::empty({rows(), g.last.size(1)}, g.last.options());
    out.index_copy_(0, torch::tensor(g.rows, torch::kLong).to(out.device()), g.last);
  }
  return out;
}

void IncrementalDecoder::read_group(Group& g, const torch::Tensor& tokens) {
  const int64_t q_len = w_.options.tgt_len, n = tokens.size(1);
  const int64_t batch = tokens.size(0);
  const auto ctx = segment_lookback(w_.model, w_.options, w_.zero_memory);
  torch::Tensor last;  // [B_g, d]
  for (int64_t pos = 0; pos < n;) {
    auto& s = g.segment;
    if (s.q_len == 0) {
      s = w_.model->begin_segment(w_.step, g.memory, ctx, batch, q_len, g.kv, w_.first_slots);
      g.tokens = tokens.narrow(1, 0, 0);
    }
    const int64_t i = g.tokens.size(1), q = std::min(n - pos, q_len - i);
    modules::StepMask mask;
    if (q == 1 && !s.first.empty()) {
      for (int64_t b = 0; b < batch; ++b) {
        mask.first.push_back(s.first[static_cast<size_t>(b * q_len + i)]);
      }
      if (std::any_of(mask.first.begin(), mask.first.end(), [](int64_t f) { return f < 0; })) {
        mask.first.clear();
      }
    }
    if (mask.first.empty()) {
      mask.bias = ops::score_bias(s.blocked.narrow(1, i, q).narrow(2, 0, s.lead + i + q),
                                  g.kv.front().scalar_type());  // [B_g, q, K]
    }
    const auto chunk = tokens.narrow(1, pos, q);  // [B_g, q]
    last = w_.model->step(w_.step, chunk, {}, g.kv, s.lead + i, mask, s.contexts);
    g.tokens = torch::cat({g.tokens, chunk}, 1);  // [B_g, i + q]
    pos += q;
    if (i + q < q_len) continue;
    // A completed segment: its forward gives the next memory.
    models::Inputs in;
    in.tokens = g.tokens;
    g.memory = w_.model->forward(in, g.memory, ctx).memory;
    g.segment = {};
    g.tokens = torch::Tensor();
  }
  g.last = w_.model->step_log_prob(g.softmax, last);  // [B_g, V]
}

void IncrementalDecoder::keep_group_rows(const std::vector<int64_t>& kept) {
  std::vector<int64_t> new_index(static_cast<size_t>(rows()), -1);
  for (size_t i = 0; i < kept.size(); ++i) new_index[static_cast<size_t>(kept[i])] = i;
  std::vector<Group> groups;
  for (auto& g : groups_) {
    std::vector<int64_t> local, rows;  // the kept rows' places in the group, their new indices
    for (size_t j = 0; j < g.rows.size(); ++j) {
      const int64_t to = new_index[static_cast<size_t>(g.rows[j])];
      if (to < 0) continue;
      local.push_back(static_cast<int64_t>(j));
      rows.push_back(to);
    }
    if (rows.empty()) continue;
    if (rows.size() == g.rows.size()) {
      g.rows = std::move(rows);
      groups.push_back(std::move(g));
      continue;
    }
    const auto index = torch::tensor(local, torch::kLong).to(w_.slots.device());
    Group k = new_group(std::move(rows), g.first);
    for (size_t l = 0; l < g.kv.size(); ++l) torch::index_select_out(k.kv[l], g.kv[l], 2, index);
    k.memory = g.memory.index_rows(index);
    k.segment = g.segment;
    if (k.segment.q_len > 0) {
      k.segment.blocked = g.segment.blocked.index_select(0, index);
      k.segment.first.clear();
      const auto q_len = static_cast<size_t>(g.segment.q_len);
      for (const auto j : g.segment.first.empty() ? std::vector<int64_t>() : local) {
        const auto from = g.segment.first.begin() + static_cast<std::ptrdiff_t>(j * q_len);
        k.segment.first.insert(k.segment.first.end(), from,
                               from + static_cast<std::ptrdiff_t>(q_len));
      }
      k.tokens = g.tokens.index_select(0, index);
      if (holds_rows(g.segment)) {
        // Begun again over the kept rows' memory, the segment writes the same keys into the
        // slots before its tokens, and hooks of their own.
        k.segment = w_.model->begin_segment(
            w_.step, k.memory, segment_lookback(w_.model, w_.options, w_.zero_memory),
            static_cast<int64_t>(k.rows.size()), g.segment.q_len, k.kv, w_.first_slots);
      }
    }
    if (g.last.defined()) k.last = g.last.index_select(0, index);
    groups.push_back(std::move(k));
  }
  groups_ = std::move(groups);
}

namespace {

// Whether two groups of one first time step are at the same place of the same kind of segment,
// without per-row hooks (their stores), so that their rows can run as one batch.
template <typename Group>
bool mergeable(const Group& a, const Group& b) {
  const auto& s = a.segment;
  const auto& t = b.segment;
  return a.first == b.first && s.q_len == t.q_len && s.lead == t.lead && !holds_rows(s) &&
         !holds_rows(t) && s.first.empty() == t.first.empty() &&
         a.tokens.defined() == b.tokens.defined() &&
         (!a.tokens.defined() || a.tokens.size(1) == b.tokens.size(1)) &&
         a.last.defined() == b.last.defined() && a.memory.length() == b.memory.length() &&
         a.memory.parts.size() == b.memory.parts.size();
}

}  // namespace

void IncrementalDecoder::merge_groups() {
  std::vector<Group> merged;
  for (auto& g : groups_) {
    auto into =
        std::find_if(merged.begin(), merged.end(), [&](const Group& m) { return mergeable(m, g); });
    if (into == merged.end()) {
      merged.push_back(std::move(g));
      continue;
    }
    std::vector<int64_t> rows = into->rows;
    rows.insert(rows.end(), g.rows.begin(), g.rows.end());
    Group both = new_group(std::move(rows), g.first);
    const int64_t n = static_cast<int64_t>(into->rows.size());
    for (size_t l = 0; l < both.kv.size(); ++l) {
      both.kv[l].narrow(2, 0, n).copy_(into->kv[l]);
      both.kv[l].narrow(2, n, static_cast<int64_t>(g.rows.size())).copy_(g.kv[l]);
    }
    if (!into->memory.empty()) both.memory = models::Memory::join_rows({into->memory, g.memory});
    both.segment = into->segment;
    if (both.segment.q_len > 0) {
      both.segment.blocked = torch::cat({into->segment.blocked, g.segment.blocked}, 0);
      both.segment.first.insert(both.segment.first.end(), g.segment.first.begin(),
                                g.segment.first.end());
    }
    if (into->tokens.defined()) both.tokens = torch::cat({into->tokens, g.tokens}, 0);
    if (into->last.defined()) both.last = torch::cat({into->last, g.last}, 0);
    *into = std::move(both);
  }
  groups_ = std::move(merged);
}

}  // namespace txl::generation
