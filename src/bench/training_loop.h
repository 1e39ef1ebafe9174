#pragma once
// The trainer's step and the evaluator's memory-mode segment on random token ids, shared by the
// throughput measurements and the profiles. Private to src/bench.

#include <torch/torch.h>

#include <cstdint>
#include <memory>

#include "txl/bench/measure.h"
#include "txl/config/config.h"
#include "txl/data/stream.h"
#include "txl/eval/settings.h"
#include "txl/models/transformer_lm.h"
#include "txl/train/step.h"

namespace txl::bench::detail {

// int64 [n] ids drawn uniformly from [0, vocab) with their own generator (seeded), so the data
// does not depend on what else ran before in the process.
torch::Tensor random_ids(std::int64_t n, std::int64_t vocab, std::uint64_t seed);

// The trainer's step (train::Step with config.model, config.train: chunks, clip, learning-rate
// schedule) on random ids, with memory carried over; one process.
class TrainingLoop {
 public:
  // Builds the model (seeded), the optimizer of config.train and a TrainStream over enough
  // random ids for `steps` steps of B x Q (the stream wraps around after that).
  TrainingLoop(const config::ExperimentConfig& config, std::int64_t vocab,
               const PhaseOptions& options, std::int64_t steps);

  // One step as the trainer takes it; returns the batch's mean nll (nats per token).
  double step();

  // B Q per segment, times the 1 + train.bptt_segments segments a step reads.
  std::int64_t tokens_per_step() const { return batch_size_ * tgt_len_ * unroll_; }

 private:
  config::ExperimentConfig config_;
  std::int64_t batch_size_, tgt_len_;
  std::int64_t unroll_ = 1;  // segments per step: 1 + train.bptt_segments
  models::TransformerLM model_{nullptr};
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<train::Step> step_;
  std::unique_ptr<data::TrainStream> stream_;
  std::int64_t steps_done_ = 0;
};

// Memory-mode evaluation of a model on random ids: B streams of segments of Q = settings.tgt_len
// with memory M = settings.mem_len, each scored by eval::score_batch as the evaluator scores it
// (B = PhaseOptions::batch_size, bf16 autocast when PhaseOptions::bf16). The
// memory starts full (random hidden states of the right shape: the cost of a segment does not
// depend on their values), so a few untimed segments stand in for the ceil(M / Q) a real pass
// needs to fill it; the stream starts at its second batch, which does not reset the memory, as
// almost every batch of a real pass.
class EvalLoop {
 public:
  // Enough random ids for `segments` segments (the stream must not run out).
  EvalLoop(models::TransformerLM model, std::int64_t vocab, const eval::Settings& settings,
           const PhaseOptions& options, std::int64_t segments);

  // One segment; returns its mean nll over the scored tokens (a sanity check: finite).
  double segment();

  std::int64_t tokens_per_segment() const { return settings_.batch_size * settings_.tgt_len; }

 private:
  models::TransformerLM model_;
  eval::Settings settings_;
  std::unique_ptr<data::EvalStream> stream_;
  std::int64_t index_ = 1;
  models::Memory memory_;
};

}  // namespace txl::bench::detail
