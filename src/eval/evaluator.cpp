#include "txl/eval/evaluator.h"

#include "txl/util/json.h"

#include <chrono>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "txl/data/stream.h"
#include "txl/util/error.h"
#include "txl/util/log.h"

namespace txl::eval {

EvalOptions resolve_eval_options(const config::ExperimentConfig& config) {
  const auto& m = config.model;
  const auto& e = config.eval;
  EvalOptions o;
  o.mode = e.mode;
  o.tgt_len = e.tgt_len > 0 ? e.tgt_len : m.tgt_len;
  o.mem_len = e.mem_len >= 0 ? e.mem_len : m.mem_len;
  o.clamp_len = e.clamp_len >= -1 ? e.clamp_len : m.clamp_len;
  o.same_length = e.same_length >= 0 ? e.same_length == 1 : m.same_length;
  o.window = e.window > 0 ? e.window : o.tgt_len;
  o.stride = e.stride;
  o.warmup = e.warmup;
  o.batch_size = e.batch_size;
  o.max_tokens = e.max_tokens;
  if (o.mode != "memory") o.mem_len = 0;
  return o;
}

namespace {

// Accumulates the sums one evaluation needs, and the per-token losses in text order on request.
class Accumulator {
 public:
  Accumulator(std::int64_t rows, bool keep_tokens) : keep_(keep_tokens), rows_(rows) {}

  // nll: float [B, T]; mask: bool [B, T]. Rows are the batch's streams (memory, segments) or
  // windows (sliding); `row_major` says whether rows are consecutive pieces of text (sliding)
  // or long streams read column by column (memory, segments).
  void add(const torch::Tensor& nll, const torch::Tensor& mask, bool row_major) {
    auto masked = nll.to(torch::kDouble).masked_fill(mask.logical_not(), 0.0);
    sum_ += masked.sum().item<double>();
    count_ += mask.sum().item<std::int64_t>();
    if (!keep_) return;
    auto values = nll.to(torch::kFloat);
    for (std::int64_t b = 0; b < nll.size(0); ++b) {
      auto piece = values[b].masked_select(mask[b]);
      if (piece.numel() == 0) continue;
      if (row_major) {
        pieces_.push_back(piece);
      } else {
        if (static_cast<std::int64_t>(per_row_.size()) < rows_) per_row_.resize(rows_);
        per_row_[b].push_back(piece);
      }
    }
  }

  double sum() const { return sum_; }
  std::int64_t count() const { return count_; }

  torch::Tensor token_losses() const {
    std::vector<torch::Tensor> all = pieces_;
    for (const auto& row : per_row_)
      for (const auto& piece : row) all.push_back(piece);
    return all.empty() ? torch::zeros({0}) : torch::cat(all);
  }

 private:
  bool keep_;
  std::int64_t rows_;
  double sum_ = 0.0;
  std::int64_t count_ = 0;
  std::vector<torch::Tensor> pieces_;
  std::vector<std::vector<torch::Tensor>> per_row_;
};

// Scores one batch on `device` (the model's): the per-token nll (on the CPU) where the batch's
// targets are scored. The memory stays on the model's device.
torch::Tensor score(models::TransformerLM& model, const torch::Device& device,
                    const data::Batch& cpu_batch, models::Memory* memory,
                    const models::Context& context) {
  const data::Batch batch = cpu_batch.to(device);
  models::Memory empty;
  auto out = model->forward(models::Inputs::of(batch), memory ? *memory : empty, context);
  if (memory) *memory = std::move(out.memory);
  return out.nll.to(torch::kCPU);
}

}  // namespace

models::Context segment_context(const EvalOptions& options, const models::TransformerLM& model) {
  const bool with_memory = options.mode == "memory" && options.mem_len > 0;
  models::Context context;
  context.mem_len = with_memory ? options.mem_len : 0;
  context.clamp_len = options.clamp_len;
  context.same_length = with_memory && options.same_length;
  context.cache_kv = with_memory && options.cache_kv && model->can_cache_kv();
  return context;
}

EvalResult evaluate(models::TransformerLM& model, const torch::Tensor& full_ids,
                    const EvalOptions& options, std::int64_t n_bytes, std::int64_t n_chars,
                    torch::Tensor* token_losses, const torch::Tensor& full_recall_mask,
                    const torch::Tensor& full_doc_starts) {
  TXL_CHECK(full_ids.dim() == 1 && full_ids.size(0) >= 2,
            "evaluation needs at least 2 tokens, got ", full_ids.numel());
  // max_tokens scores a prefix of the text, the same tokens in every mode (memory and segments
  // read B parallel streams, so stopping after max_tokens would sample B places instead).
  const std::int64_t n_full = full_ids.size(0);
  const std::int64_t n = options.max_tokens > 0 ? std::min(n_full, options.max_tokens + 1) : n_full;
  const torch::Tensor ids = full_ids.narrow(0, 0, n);  // int64 [N]
  const torch::Tensor recall_mask =
      full_recall_mask.defined() ? full_recall_mask.narrow(0, 0, std::min(n, full_recall_mask.numel()))
                                 : torch::Tensor();
  torch::Tensor doc_starts = full_doc_starts;
  if (doc_starts.defined() && n < n_full) doc_starts = doc_starts.masked_select(doc_starts < n - 1);
  TXL_CHECK(options.mode == "memory" || options.mode == "segments" || options.mode == "sliding",
            "eval.mode: '", options.mode, "' is not one of memory | segments | sliding");
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  const auto start = std::chrono::steady_clock::now();

  EvalResult result;
  result.mode = options.mode;
  const bool documents = doc_starts.defined();
  TXL_CHECK(!documents || (token_losses == nullptr && !recall_mask.defined() && options.mode != "sliding"),
            "document-mode evaluation gives no per-token losses, recall or sliding windows");
  const bool want_recall = recall_mask.defined();
  if (want_recall) {
    TXL_CHECK(full_recall_mask.numel() == n_full, "recall mask has ", full_recall_mask.numel(),
              " entries for ", n_full, " tokens");
  }
  Accumulator acc(options.batch_size, token_losses != nullptr || want_recall);
  const torch::Device device = model->parameters().front().device();
  dist::Group* group = options.group != nullptr && options.group->distributed() ? options.group : nullptr;
  // Memory and segments: this rank's rows of every batch, which stay with their memory (all of
  // them in one process).
  auto my_rows = [&](const data::Batch& batch) -> std::optional<data::Batch> {
    if (group == nullptr) return batch;
    auto range = dist::shard_rows(batch.rows(), group->rank(), group->world_size());
    if (range.size() == 0) return std::nullopt;
    return batch.narrow_rows(range.begin, range.size());
  };

  if (options.mode == "sliding") {
    data::SlidingStreamOptions so;
    so.batch_size = options.batch_size;
    so.window = options.window;
    so.stride = options.stride;
    data::SlidingStream stream(ids, so);
    models::Context context;  // no memory: every window stands alone
    context.clamp_len = options.clamp_len;
    result.window = options.window;
    result.stride = options.stride;
    result.tgt_len = options.window;
    // Windows stand alone, so each rank takes one stretch of whole batches: its losses are one
    // stretch of the text, and the ranks' stretches gathered in rank order are the text's.
    const auto mine = group == nullptr ? dist::RowRange{0, stream.size()}
                                       : dist::shard_rows(stream.size(), group->rank(), group->world_size());
    for (std::int64_t i = mine.begin; i < mine.end; ++i) {
      const data::Batch batch = stream.batch(i);
      acc.add(score(model, device, batch, nullptr, context), batch.target_mask, true);
    }
  } else {
    const bool with_memory = options.mode == "memory" && options.mem_len > 0;
    data::EvalStreamOptions so;
    so.batch_size = options.batch_size;
    so.tgt_len = options.tgt_len;
    so.warmup = with_memory ? options.warmup : 0;
    data::EvalStream stream(ids, so, doc_starts);
    const models::Context context = segment_context(options, model);
    result.tgt_len = options.tgt_len;
    result.mem_len = context.mem_len;
    models::Memory memory;
    while (true) {
      auto all = stream.next();
      if (!all) break;
      auto batch = my_rows(*all);  // the same rows every batch, so memory stays with them
      if (batch)
        acc.add(score(model, device, *batch, with_memory ? &memory : nullptr, context),
                batch->target_mask, false);
    }
  }

  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (was_training) model->train();
  double sum = acc.sum();
  std::int64_t count = acc.count();
  if (group != nullptr) {
    auto totals = torch::tensor({sum, static_cast<double>(count)}, torch::kDouble);  // [2]
    group->all_reduce(totals);
    sum = totals[0].item<double>();
    count = static_cast<std::int64_t>(totals[1].item<double>());
  }
  TXL_CHECK(count > 0, "evaluation scored no token");
  TXL_CHECK(std::isfinite(sum), "evaluation loss is not finite (", sum, ")");

  const double total_bits = sum / std::log(2.0);
  // When only part of the split was scored, bytes and characters are prorated by tokens.
  // Bytes and characters are prorated when only a prefix was scored.
  const double fraction = static_cast<double>(n - 1) / static_cast<double>(n_full - 1);
  result.tokens = count;
  result.loss = sum / static_cast<double>(count);
  result.ppl = std::exp(result.loss);
  result.bits_per_token = result.loss / std::log(2.0);
  result.bits_per_byte = n_bytes > 0 ? total_bits / (static_cast<double>(n_bytes) * fraction) : 0.0;
  result.bits_per_char = n_chars > 0 ? total_bits / (static_cast<double>(n_chars) * fraction) : 0.0;
  result.seconds = seconds;
  result.tokens_per_s = seconds > 0 ? static_cast<double>(count) / seconds : 0.0;
  if (token_losses || want_recall) {
    auto losses = acc.token_losses();  // float [N - 1], target t + 1 at index t
    // A rank's rows are consecutive streams, so its losses are one stretch of the text.
    if (group != nullptr) losses = group->all_gather_rows(losses);
    if (want_recall) {
      auto selected = losses.masked_select(recall_mask.narrow(0, 1, ids.size(0) - 1).to(torch::kBool));
      result.recall_tokens = selected.numel();
      result.recall_loss = selected.numel() > 0 ? selected.to(torch::kDouble).mean().item<double>() : 0.0;
    }
    if (token_losses) *token_losses = losses;
  }
  return result;
}

std::string to_json(const EvalResult& r) {
  json::Json j = {{"split", r.split},   {"mode", r.mode},     {"tgt_len", r.tgt_len},
                  {"mem_len", r.mem_len}, {"window", r.window}, {"stride", r.stride},
                  {"tokens", r.tokens},   {"recall_tokens", r.recall_tokens}};
  const std::pair<const char*, double> numbers[] = {
      {"loss", r.loss},
      {"ppl", r.ppl},
      {"bits_per_token", r.bits_per_token},
      {"bits_per_byte", r.bits_per_byte},
      {"bits_per_char", r.bits_per_char},
      {"seconds", r.seconds},
      {"tokens_per_s", r.tokens_per_s},
      {"recall_loss", r.recall_loss}};
  for (const auto& [key, value] : numbers) json::put_number(j, key, value);
  return j.dump();
}

}  // namespace txl::eval
