#include "txl/eval/evaluator.h"

#include <chrono>
#include <cmath>
#include <optional>
#include <vector>

#include "txl/data/stream.h"
#include "txl/dist/group.h"
#include "txl/ops/projection.h"
#include "txl/util/autocast.h"
#include "txl/util/error.h"
#include "txl/util/json.h"

namespace txl::eval {

torch::Tensor masked_sum(const torch::Tensor& nll, const torch::Tensor& mask) {
  return nll.to(torch::kDouble).masked_fill(mask.logical_not(), 0.0).sum();  // []
}

double BatchScore::sum_value() const { return sum.item<double>(); }

BatchScore score_batch(models::TransformerLM& model, const data::Batch& cpu_batch,
                       const Settings& settings, models::Memory* memory,
                       std::vector<torch::Tensor>* attention) {
  torch::NoGradGuard no_grad;
  const data::Batch batch = cpu_batch.to(settings.device);
  models::LMOutput out;
  {
    // As a training step (train::Step): without it, 2 threads evaluated the default job's model
    // in fp32 3x slower than 1 (docs/performance.md, 2026-12-07, fourth entry).
    std::optional<ops::ProductThreads> threads;
    if (ops::products_on_blas_threads(settings.device, settings.bf16)) threads.emplace();
    AutocastGuard autocast(settings.bf16, settings.device);
    out = model->forward(models::Inputs::of(batch), memory ? *memory : models::Memory(),
                         segment_lookback(settings, model), false, attention);
  }
  if (memory) *memory = std::move(out.memory);  // stays on the device
  BatchScore score;
  score.nll = out.nll;  // float [B, T], on the device
  score.sum = masked_sum(score.nll, batch.target_mask);
  score.target_mask = batch.target_mask;
  score.count = cpu_batch.n_scored;
  return score;
}

data::EncodedSplit scored_prefix(const data::EncodedSplit& split, std::int64_t max_tokens) {
  const std::int64_t targets = split.ids.size(0) - 1;
  if (max_tokens <= 0 || max_tokens >= targets) return split;
  const double fraction = static_cast<double>(max_tokens) / static_cast<double>(targets);
  data::EncodedSplit prefix;
  prefix.ids = split.ids.narrow(0, 0, max_tokens + 1);  // int64 [max_tokens + 1]
  prefix.n_bytes = std::llround(static_cast<double>(split.n_bytes) * fraction);
  prefix.n_chars = std::llround(static_cast<double>(split.n_chars) * fraction);
  prefix.n_words = std::llround(static_cast<double>(split.n_words) * fraction);
  if (split.doc_starts.defined())  // int64 [documents starting before the last token]
    prefix.doc_starts = split.doc_starts.masked_select(split.doc_starts < max_tokens);
  return prefix;
}

namespace {

// Loss summed by position of the segment (batch column; ext_len is 0) on the device, and the
// scored tokens by position on the host, Q wide on every rank so that every rank takes part in
// the reduction.
class PositionTotals {
 public:
  PositionTotals(std::int64_t q, const torch::Device& device)
      : sum_(torch::zeros({q}, torch::TensorOptions(torch::kDouble).device(device))),  // [Q]
        count_(torch::zeros({q}, torch::kInt64)) {}                                    // [Q]

  void add(const BatchScore& score, const torch::Tensor& host_mask) {
    const std::int64_t t = host_mask.size(1);
    TXL_CHECK(t <= sum_.size(0), "losses by position: a batch of ", t, " columns for segments of ",
              sum_.size(0));
    sum_.narrow(0, 0, t).add_(
        score.nll.to(torch::kDouble).masked_fill(score.target_mask.logical_not(), 0.0).sum(0));
    count_.narrow(0, 0, t).add_(host_mask.sum(0));
  }

  // Sums and counts of every rank, read once.
  std::pair<std::vector<double>, std::vector<std::int64_t>> read(dist::Group* group) const {
    auto both = torch::stack({sum_.to(torch::kCPU), count_.to(torch::kDouble)});  // [2, Q]
    if (group != nullptr) group->all_reduce(both);
    const std::int64_t q = both.size(1);
    const double* v = both.data_ptr<double>();
    std::vector<double> sums(v, v + q);
    std::vector<std::int64_t> counts(static_cast<size_t>(q));
    for (std::int64_t p = 0; p < q; ++p) counts[static_cast<size_t>(p)] = std::llround(v[q + p]);
    return {sums, counts};
  }

 private:
  torch::Tensor sum_;    // double [Q] on the device
  torch::Tensor count_;  // int64 [Q] on the host
};

// Accumulates the sums one evaluation needs, and the per-token losses in text order and the
// losses by position on request.
class Accumulator {
 public:
  Accumulator(const Settings& settings, bool keep_tokens, bool by_position)
      : keep_(keep_tokens), rows_(settings.batch_size) {
    if (by_position) positions_.emplace(settings.tgt_len, settings.device);
  }

  const std::optional<PositionTotals>& positions() const { return positions_; }

  // Rows are the batch's streams (memory, segments) or windows (sliding); `row_major` says
  // whether rows are consecutive pieces of text (sliding) or long streams read column by column
  // (memory, segments). mask: bool [B, T], the batch's target_mask.
  // The sum stays on the device; per-token losses, when kept, come to the host batch by batch.
  void add(const BatchScore& score, const torch::Tensor& mask, bool row_major) {
    add_totals(score, mask);
    if (!keep_) return;
    auto values = score.nll.to(torch::kCPU, torch::kFloat);  // [B, T]
    for (std::int64_t b = 0; b < values.size(0); ++b) {
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

  // The one read of the evaluation's sum from the device.
  double sum() const { return sum_.defined() ? sum_.item<double>() : 0.0; }
  bool keeps_tokens() const { return keep_; }
  std::int64_t count() const { return count_; }

  // Document mode, losses kept: the batch's per-token losses put at their text positions (rows
  // then do not read the text in order: documents are dealt to whichever stream is shortest).
  void place(const BatchScore& score, const torch::Tensor& mask,
             const data::EvalStream::RowTargets& rows, std::int64_t n_targets) {
    add_totals(score, mask);
    if (!placed_.defined()) {
      placed_ = torch::full({n_targets}, std::nan(""), torch::kFloat);  // [N - 1]
      scored_ = torch::zeros({n_targets}, torch::kBool);                // [N - 1]
    }
    auto values = score.nll.to(torch::kCPU, torch::kFloat);  // [B, T]
    const auto mask_cpu = mask.to(torch::kCPU);
    const auto counts = rows.count.accessor<std::int64_t, 1>();  // [B]
    const auto firsts = rows.first.accessor<std::int64_t, 1>();  // [B]
    for (std::int64_t b = 0; b < values.size(0); ++b) {
      const std::int64_t count = counts[b], first = firsts[b];
      if (count == 0) continue;
      auto piece = values[b].masked_select(mask_cpu[b]);  // [count], in column order
      TXL_CHECK(piece.numel() == count, "document row ", b, " scored ", piece.numel(),
                " targets where its layout has ", count);
      placed_.narrow(0, first, count).copy_(piece);
      scored_.narrow(0, first, count).fill_(true);
    }
  }

  torch::Tensor token_losses() const {
    // Document mode: the scored targets in text order (each document's first token is not one).
    if (placed_.defined()) return placed_.masked_select(scored_);
    std::vector<torch::Tensor> all = pieces_;
    for (const auto& row : per_row_)
      for (const auto& piece : row) all.push_back(piece);
    return all.empty() ? torch::zeros({0}) : torch::cat(all);
  }

 private:
  bool keep_;
  std::int64_t rows_;
  torch::Tensor sum_;  // double [], on the device; undefined before the first batch
  std::int64_t count_ = 0;
  std::vector<torch::Tensor> pieces_;
  std::vector<std::vector<torch::Tensor>> per_row_;
  torch::Tensor placed_, scored_;  // document mode: float [N - 1] losses, bool [N - 1] scored
  std::optional<PositionTotals> positions_;

  void add_totals(const BatchScore& score, const torch::Tensor& mask) {
    sum_ = sum_.defined() ? sum_ + score.sum : score.sum;  // []
    count_ += score.count;
    if (positions_) positions_->add(score, mask);
  }
};

// The group the evaluation is shared with; null when this process is alone.
dist::Group* sharing(const Settings& settings) {
  return settings.group != nullptr && settings.group->distributed() ? settings.group : nullptr;
}

// Sliding: windows stand alone, so each rank takes one stretch of whole batches: its losses are
// one stretch of the text, and the ranks' stretches gathered in rank order are the text's.
void score_windows(models::TransformerLM& model, const torch::Tensor& ids, const Settings& settings,
                   Accumulator& acc) {
  data::SlidingStream stream(ids, sliding_stream_options(settings));
  dist::Group* group = sharing(settings);
  const auto mine = group == nullptr
                        ? dist::RowRange{0, stream.size()}
                        : dist::shard_rows(stream.size(), group->rank(), group->world_size());
  for (std::int64_t i = mine.begin; i < mine.end; ++i) {
    const data::Batch batch = stream.batch(i);
    acc.add(score_batch(model, batch, settings, nullptr), batch.target_mask, true);
  }
}

// Memory and segments: each rank scores its rows of every batch, the same rows every batch, so
// their memory stays with them (all rows in one process).
void score_segments(models::TransformerLM& model, const data::EncodedSplit& text,
                    const Settings& settings, const Extras& extras, Accumulator& acc) {
  data::EvalStream stream(text.ids, eval_stream_options(settings),
                          settings.documents ? text.doc_starts : torch::Tensor());
  dist::Group* group = sharing(settings);
  const bool with_memory = carries_memory(settings, model);
  models::Memory memory;
  while (auto all = stream.next()) {
    std::optional<data::Batch> batch = *all;
    if (group != nullptr) {
      const auto range = dist::shard_rows(all->rows(), group->rank(), group->world_size());
      batch = range.size() > 0 ? std::optional(all->narrow_rows(range.begin, range.size()))
                               : std::nullopt;
    }
    if (!batch) continue;
    std::vector<torch::Tensor> weights;  // per layer [B, H, T, K], when observed
    const BatchScore score = score_batch(model, *batch, settings, with_memory ? &memory : nullptr,
                                         extras.attention ? &weights : nullptr);
    if (extras.attention) extras.attention(weights, score);
    if (stream.document_mode() && acc.keeps_tokens())
      acc.place(score, batch->target_mask, stream.row_targets(batch->index), text.ids.size(0) - 1);
    else
      acc.add(score, batch->target_mask, false);
  }
}

void check_request(const models::TransformerLM& model, const data::EncodedSplit& text,
                   const Settings& settings, const Extras& extras) {
  TXL_CHECK(text.ids.dim() == 1 && text.ids.size(0) >= 2,
            "evaluation needs at least 2 tokens, got ", text.ids.numel());
  const torch::Device at = model->parameters().front().device();
  TXL_CHECK(at == settings.device, "evaluation runs where the model is: the model is on ", at.str(),
            " but the evaluation settings say ", settings.device.str());
  TXL_CHECK(!extras.recall_mask.defined() || extras.recall_mask.numel() == text.ids.numel(),
            "recall mask has ", extras.recall_mask.numel(), " entries for ", text.ids.numel(),
            " tokens");
  TXL_CHECK(!extras.by_position || settings.mode != Mode::kSliding,
            "losses by position need segments (eval.mode memory or segments), not sliding windows");
  TXL_CHECK(!extras.attention || settings.mode != Mode::kSliding,
            "attention weights are observed in memory or segments mode (eval.mode), not sliding");
  TXL_CHECK(!extras.by_position || settings.ext_len == 0,
            "losses by position are not measured with model.ext_len = ", settings.ext_len,
            " (the segment's columns then start at different places)");
  if (!settings.documents) return;
  TXL_CHECK(settings.mode != Mode::kSliding && !extras.recall_mask.defined(),
            "data.document_mode: evaluating documents on their own gives no sliding windows or "
            "recall; set data.document_mode=false for plain text");
  TXL_CHECK(!extras.token_losses || sharing(settings) == nullptr,
            "data.document_mode: per-token losses are kept in one process only (documents are "
            "dealt to streams, so a rank's rows are not one stretch of the text)");
  TXL_CHECK(text.doc_starts.defined() && text.doc_starts.numel() > 0,
            "data.document_mode: the text has no document starts");
}

// The figures from the sums over every rank.
void fill_figures(EvalResult& r, double sum, std::int64_t count, const data::EncodedSplit& text) {
  TXL_CHECK(count > 0, "evaluation scored no token");
  TXL_CHECK(std::isfinite(sum), "evaluation loss is not finite (", sum, ")");
  const double total_bits = sum / std::log(2.0);
  r.tokens = count;
  r.loss = sum / static_cast<double>(count);
  r.ppl = std::exp(r.loss);
  r.bits_per_token = r.loss / std::log(2.0);
  r.bits_per_byte = text.n_bytes > 0 ? total_bits / static_cast<double>(text.n_bytes) : 0.0;
  r.bits_per_char = text.n_chars > 0 ? total_bits / static_cast<double>(text.n_chars) : 0.0;
  r.words = text.n_words;
  r.word_ppl = text.n_words > 0 ? std::exp(sum / static_cast<double>(text.n_words)) : 0.0;
  r.tokens_per_s = r.seconds > 0 ? static_cast<double>(count) / r.seconds : 0.0;
}

// Per-token losses and the recall figures from the accumulated losses of every rank.
void fill_token_figures(EvalResult& r, const Accumulator& acc, const Settings& settings,
                        const Extras& extras, std::int64_t n) {
  auto losses = acc.token_losses();  // float [N - 1], target t + 1 at index t
  // A rank's rows are consecutive streams (or batches of windows), so its losses are one
  // stretch of the text.
  if (dist::Group* group = sharing(settings)) losses = group->all_gather_rows(losses);
  if (extras.recall_mask.defined()) {
    const auto recall = extras.recall_mask.narrow(0, 1, n - 1).to(torch::kBool);  // [N - 1]
    auto selected = losses.masked_select(recall);
    r.recall_tokens = selected.numel();
    r.recall_loss = selected.numel() > 0 ? selected.to(torch::kDouble).mean().item<double>() : 0.0;
  }
  if (extras.token_losses) r.token_losses = losses;
}

// Mean loss and scored tokens at every position of the segment.
void fill_position_figures(EvalResult& r, const PositionTotals& totals, const Settings& settings) {
  auto [sums, counts] = totals.read(sharing(settings));
  r.tokens_by_position = counts;
  r.loss_by_position.resize(sums.size());
  for (size_t p = 0; p < sums.size(); ++p)
    r.loss_by_position[p] = counts[p] > 0 ? sums[p] / static_cast<double>(counts[p]) : std::nan("");
}

}  // namespace

EvalResult evaluate(models::TransformerLM& model, const data::EncodedSplit& split,
                    const Settings& settings, const Extras& extras) {
  check_request(model, split, settings, extras);
  const data::EncodedSplit text = scored_prefix(split, settings.max_tokens);
  const std::int64_t n = text.ids.size(0);
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  const auto start = std::chrono::steady_clock::now();

  EvalResult result;
  result.mode = settings.mode;
  result.documents = settings.documents;
  result.max_tokens = settings.max_tokens;
  const bool keep_tokens = extras.token_losses || extras.recall_mask.defined();
  Accumulator acc(settings, keep_tokens, extras.by_position);
  if (settings.mode == Mode::kSliding) {
    result.tgt_len = settings.window;
    result.window = settings.window;
    result.stride = settings.stride;
    score_windows(model, text.ids, settings, acc);
  } else {
    result.tgt_len = settings.tgt_len;
    result.mem_len = segment_lookback(settings, model).mem_len;
    score_segments(model, text, settings, extras, acc);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (was_training) model->train();

  double sum = acc.sum();
  std::int64_t count = acc.count();
  if (dist::Group* group = sharing(settings)) {
    auto totals = torch::tensor({sum, static_cast<double>(count)}, torch::kDouble);  // [2]
    group->all_reduce(totals);
    sum = totals[0].item<double>();
    count = static_cast<std::int64_t>(totals[1].item<double>());
  }
  fill_figures(result, sum, count, text);
  if (keep_tokens) fill_token_figures(result, acc, settings, extras, n);
  if (acc.positions()) fill_position_figures(result, *acc.positions(), settings);
  return result;
}

std::string to_json(const EvalResult& r) {
  json::Json j = {{"split", r.split},
                  {"mode", config::to_string(r.mode)},
                  {"tgt_len", r.tgt_len},
                  {"mem_len", r.mem_len},
                  {"window", r.window},
                  {"stride", r.stride},
                  {"reset", r.documents ? "document" : "stream"},
                  {"max_tokens", r.max_tokens},
                  {"tokens", r.tokens},
                  {"words", r.words},
                  {"recall_tokens", r.recall_tokens}};
  const std::pair<const char*, double> numbers[] = {{"loss", r.loss},
                                                    {"ppl", r.ppl},
                                                    {"bits_per_token", r.bits_per_token},
                                                    {"bits_per_byte", r.bits_per_byte},
                                                    {"bits_per_char", r.bits_per_char},
                                                    {"word_ppl", r.word_ppl},
                                                    {"seconds", r.seconds},
                                                    {"tokens_per_s", r.tokens_per_s},
                                                    {"recall_loss", r.recall_loss}};
  for (const auto& [key, value] : numbers) json::put_number(j, key, value);
  if (!r.loss_by_position.empty()) {
    j["loss_by_position"] = json::number_list(r.loss_by_position);  // no token scored there: null
    j["tokens_by_position"] = r.tokens_by_position;
  }
  return j.dump();
}

}  // namespace txl::eval
