#include "training_loop.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>

#include "txl/eval/evaluator.h"
#include "txl/train/schedule.h"
#include "txl/train/trainer.h"
#include "txl/util/autocast.h"
#include "txl/util/error.h"

namespace txl::bench::detail {

torch::Tensor random_ids(std::int64_t n, std::int64_t vocab, std::uint64_t seed) {
  auto generator = at::detail::createCPUGenerator(seed);
  return torch::randint(vocab, {n}, generator, torch::kLong);  // [n]
}

TrainingLoop::TrainingLoop(const config::ExperimentConfig& config, std::int64_t vocab,
                           const PhaseOptions& options, std::int64_t steps)
    : config_(config),
      batch_size_(options.batch_size),
      tgt_len_(config.model.tgt_len),
      unroll_(1 + config.train.bptt_segments) {
  TXL_CHECK(options.batch_size >= 1 && steps >= 1, "bench: needs batch >= 1 and steps >= 1, got ",
            options.batch_size, " and ", steps);
  torch::manual_seed(options.seed);
  model_ = models::TransformerLM(config.model, vocab);
  model_->to(options.device);
  model_->train();
  optimizer_ = train::make_optimizer(config.train, model_->parameters());
  train::StepSettings settings;
  settings.bf16 = options.bf16;
  settings.device = options.device;
  settings.batch_chunk = config.train.batch_chunk;
  settings.clip = config.train.clip;
  step_ =
      std::make_unique<train::Step>(model_, *optimizer_, settings, dist::RowRange{0, batch_size_});

  data::TrainStreamOptions so;
  so.batch_size = batch_size_;
  so.tgt_len = tgt_len_;
  so.ext_len = config.model.ext_len;
  so.seed = options.seed;
  // Every stream holds the segments of `steps` steps plus the one token of look-ahead.
  const std::int64_t per_stream = steps * unroll_ * tgt_len_ + 1;
  stream_ = std::make_unique<data::TrainStream>(
      random_ids(batch_size_ * per_stream, vocab, options.seed), so);
}

double TrainingLoop::step() {
  const double lr = train::learning_rate(config_.train, ++steps_done_);
  std::vector<data::Batch> unroll;
  for (std::int64_t s = 0; s < unroll_; ++s) unroll.push_back(stream_->next());
  const double loss = step_->run(unroll, lr).mean_loss();
  TXL_CHECK(std::isfinite(loss), "bench: training loss is ", loss);
  return loss;
}

EvalLoop::EvalLoop(models::TransformerLM model, std::int64_t vocab, const eval::Settings& settings,
                   const PhaseOptions& options, std::int64_t segments)
    : model_(std::move(model)), settings_(settings) {
  TXL_CHECK(options.batch_size >= 1 && segments >= 1,
            "bench: needs batch >= 1 and segments >= 1, got ", options.batch_size, " and ",
            segments);
  settings_.batch_size = static_cast<int>(options.batch_size);
  settings_.bf16 = options.bf16;
  settings_.device = options.device;  // the model's (measure_eval moved it there)
  const std::int64_t b = settings_.batch_size, q = settings_.tgt_len;
  // Segment 0 is skipped (it would reset the memory).
  stream_ = std::make_unique<data::EvalStream>(
      random_ids(b * (segments + 1) * q + 1, vocab, options.seed),
      eval::eval_stream_options(settings_));
  const std::int64_t m = eval::segment_lookback(settings_, model_).mem_len;  // as the evaluator
  for (int l = 0; m > 0 && l < model_->config().n_layer; ++l) {
    memory_.layers.push_back(
        torch::randn({b, m, model_->config().d_model}).to(options.device));  // [B, M, d]
  }
}

double EvalLoop::segment() {
  model_->eval();
  const auto score = eval::score_batch(model_, stream_->batch(index_++), settings_, &memory_);
  return score.sum_value() / static_cast<double>(std::max<std::int64_t>(score.count, 1));
}

}  // namespace txl::bench::detail
