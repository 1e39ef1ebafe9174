// Where each scored token of an evaluation sits in its segment and memory (memory_gain.h): the
// evaluator's stream run over the token offsets, with the model's memory rule beside it.
#include <algorithm>
#include <vector>

#include "txl/data/stream.h"
#include "txl/eval/memory_gain.h"
#include "txl/util/error.h"

namespace txl::eval {

ReachOptions reach_options(const Settings& settings) {
  TXL_CHECK(settings.mode != Mode::kSliding,
            "where memory helps: sliding windows have no segments or memory; evaluate in "
            "eval.mode memory (or segments)");
  TXL_CHECK(settings.ext_len == 0, "where memory helps: model.ext_len = ", settings.ext_len,
            " puts unscored context in front of every segment, which the analysis does not "
            "model; use model.ext_len 0");
  ReachOptions options;
  options.batch_size = settings.batch_size;
  options.tgt_len = settings.tgt_len;
  options.mem_len = settings.mode == Mode::kMemory ? settings.mem_len : 0;
  options.warmup = settings.mode == Mode::kMemory ? settings.warmup : 0;
  options.same_length = settings.same_length && options.mem_len > 0;
  options.documents = settings.documents;
  return options;
}

namespace {

// Books one row of one batch: the reach of its scored targets into seg/vis (by target offset),
// then the row's memory after it. memory: the offsets of the inputs the stream's last M columns
// hold (-1 = padding, or a column emptied by a reset), as models/lm_memory.cpp keeps them.
void book_row(const data::Batch& batch, std::int64_t r, const ReachOptions& o,
              std::vector<std::int64_t>& memory, std::vector<std::int64_t>& seg,
              std::vector<std::int64_t>& vis) {
  const auto tokens = batch.tokens.accessor<std::int64_t, 2>();
  const auto targets = batch.targets.accessor<std::int64_t, 2>();
  const auto real = batch.input_mask.accessor<bool, 2>();
  const auto scored = batch.target_mask.accessor<bool, 2>();
  if (batch.reset.accessor<bool, 1>()[r]) std::fill(memory.begin(), memory.end(), -1);
  const auto m = static_cast<std::int64_t>(memory.size());
  const std::int64_t t = batch.length();
  std::vector<std::int64_t> keys = memory;  // concat(memory, segment): [m + T]
  for (std::int64_t c = 0; c < t; ++c) keys.push_back(real[r][c] ? tokens[r][c] : -1);
  // first[i]: the first real key at or after i (m + T where none).
  std::vector<std::int64_t> first(keys.size() + 1, m + t);
  for (auto i = static_cast<std::int64_t>(keys.size()) - 1; i >= 0; --i)
    first[i] = keys[i] >= 0 ? i : first[i + 1];
  std::int64_t segment_begin = -1;
  for (std::int64_t c = 0; c < t; ++c) {
    if (!scored[r][c]) continue;
    if (segment_begin < 0) segment_begin = tokens[r][c];
    // Query c sees keys [0, m + c], or with same_length the last M of them (ops::causal_mask).
    const std::int64_t lo = o.same_length ? std::max<std::int64_t>(0, m + c + 1 - o.mem_len) : 0;
    const std::int64_t u = targets[r][c];
    seg[u] = segment_begin;
    vis[u] = keys[first[lo]];  // key m + c (the input itself) is real, so first[lo] <= m + c
  }
  const auto kept = std::min<std::int64_t>(o.mem_len, static_cast<std::int64_t>(keys.size()));
  memory.assign(keys.end() - kept, keys.end());
}

void check_reach_options(std::int64_t n_tokens, const ReachOptions& o) {
  TXL_CHECK(n_tokens >= 2, "where memory helps: the split has ", n_tokens,
            " tokens; at least 2 are needed for one target");
  TXL_CHECK(o.batch_size >= 1, "where memory helps: batch size ", o.batch_size,
            " must be at least 1");
  TXL_CHECK(o.tgt_len >= 1, "where memory helps: segment length ", o.tgt_len,
            " must be at least 1");
  TXL_CHECK(o.mem_len >= 0, "where memory helps: memory length ", o.mem_len, " must be >= 0");
  TXL_CHECK(o.warmup >= 0, "where memory helps: warm-up ", o.warmup, " must be >= 0");
  TXL_CHECK(!o.same_length || o.mem_len > 0,
            "where memory helps: same_length needs a memory (mem_len > 0)");
}

}  // namespace

SegmentReach segment_reach(std::int64_t n_tokens, const torch::Tensor& doc_starts,
                           const ReachOptions& o) {
  check_reach_options(n_tokens, o);
  TXL_CHECK(!o.documents || doc_starts.defined(),
            "where memory helps: per-document reset needs the split's document starts");
  data::EvalStreamOptions stream_options;
  stream_options.batch_size = o.batch_size;
  stream_options.tgt_len = o.tgt_len;
  stream_options.warmup = o.warmup;
  stream_options.pad_id = -1;
  // The ids are the offsets themselves, so every column names the input it holds.
  data::EvalStream stream(torch::arange(n_tokens, torch::kInt64), stream_options,  // ids [N]
                          o.documents ? doc_starts : torch::Tensor());
  std::vector<std::int64_t> seg(static_cast<size_t>(n_tokens), -1);
  std::vector<std::int64_t> vis(static_cast<size_t>(n_tokens), -1);
  std::vector<std::vector<std::int64_t>> memories(static_cast<size_t>(o.batch_size));
  for (std::int64_t i = 0; i < stream.size(); ++i) {
    const data::Batch batch = stream.batch(i);
    for (std::int64_t r = 0; r < batch.rows(); ++r) book_row(batch, r, o, memories[r], seg, vis);
  }
  std::vector<std::int64_t> target, seg_begin, vis_begin;
  for (std::int64_t u = 1; u < n_tokens; ++u) {
    if (seg[u] < 0) continue;
    target.push_back(u);
    seg_begin.push_back(seg[u]);
    vis_begin.push_back(vis[u]);
  }
  TXL_CHECK(static_cast<std::int64_t>(target.size()) == stream.n_targets(),
            "where memory helps: the stream scored ", target.size(), " distinct targets of ",
            stream.n_targets());
  SegmentReach reach;
  reach.target = torch::tensor(target, torch::kInt64);            // [T]
  reach.segment_begin = torch::tensor(seg_begin, torch::kInt64);  // [T]
  reach.visible_begin = torch::tensor(vis_begin, torch::kInt64);  // [T]
  return reach;
}

}  // namespace txl::eval
