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

train::RandomStepsOptions random_steps_options(const PhaseOptions& options) {
  train::RandomStepsOptions o;
  o.batch_size = options.batch_size;
  o.device = options.device;
  o.seed = options.seed;
  return o;
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
      train::random_ids(b * (segments + 1) * q + 1, vocab, options.seed),
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
