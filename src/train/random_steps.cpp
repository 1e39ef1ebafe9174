#include "txl/train/random_steps.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "txl/train/schedule.h"
#include "txl/train/trainer.h"
#include "txl/util/error.h"

namespace txl::train {

torch::Tensor random_ids(std::int64_t n, std::int64_t vocab, std::uint64_t seed) {
  auto generator = at::detail::createCPUGenerator(seed);
  return torch::randint(vocab, {n}, generator, torch::kLong);  // [n]
}

RandomSteps::RandomSteps(const config::ExperimentConfig& config, std::int64_t vocab,
                         const RandomStepsOptions& options, std::int64_t steps)
    : config_(config),
      batch_size_(options.batch_size),
      tgt_len_(config.model.tgt_len),
      unroll_(1 + config.train.bptt_segments) {
  TXL_CHECK(options.batch_size >= 1 && steps >= 1,
            "random steps: need batch >= 1 and steps >= 1, got ", options.batch_size, " and ",
            steps);
  torch::manual_seed(options.seed);
  model_ = models::TransformerLM(config.model, vocab);
  model_->to(options.device);
  model_->train();
  optimizer_ = make_optimizer(config.train, model_->parameters());
  StepSettings settings;
  settings.device = options.device;
  settings.batch_chunk = config.train.batch_chunk;
  settings.clip = config.train.clip;
  const dist::RowRange rows{0, batch_size_};
  fp32_ = std::make_unique<Step>(model_, *optimizer_, settings, rows);
  settings.bf16 = true;
  bf16_ = std::make_unique<Step>(model_, *optimizer_, settings, rows);

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

double RandomSteps::step(bool bf16) {
  const double lr = learning_rate(config_.train, ++steps_done_);
  std::vector<data::Batch> unroll;
  for (std::int64_t s = 0; s < unroll_; ++s) unroll.push_back(stream_->next());
  const double loss = (bf16 ? *bf16_ : *fp32_).run(unroll, lr).mean_loss();
  TXL_CHECK(std::isfinite(loss), "random steps: training loss is ", loss);
  return loss;
}

}  // namespace txl::train
