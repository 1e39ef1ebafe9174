#pragma once
// Training steps as the trainer takes them, on random token ids: what txl-bench times and what
// run.precision: auto measures (train/precision.h). One process.

#include <torch/torch.h>

#include <cstdint>
#include <memory>

#include "txl/config/config.h"
#include "txl/data/stream.h"
#include "txl/models/transformer_lm.h"
#include "txl/train/step.h"

namespace txl::train {

// int64 [n] ids drawn uniformly from [0, vocab) with their own generator (seeded), so the data
// does not depend on what else ran before in the process.
torch::Tensor random_ids(std::int64_t n, std::int64_t vocab, std::uint64_t seed);

struct RandomStepsOptions {
  std::int64_t batch_size = 16;        // B rows
  torch::Device device = torch::kCPU;  // where the model runs
  std::uint64_t seed = 1234;           // model initialisation and the ids
};

// The trainer's step (train::Step with config.model, config.train: chunks, clip, learning-rate
// schedule) on random ids, with memory carried over, in fp32 or under bf16 autocast.
class RandomSteps {
 public:
  // Builds the model (seeded: it draws from the process's generator), the optimizer of
  // config.train and a TrainStream over enough random ids for `steps` steps of B x Q (the
  // stream wraps around after that).
  RandomSteps(const config::ExperimentConfig& config, std::int64_t vocab,
              const RandomStepsOptions& options, std::int64_t steps);

  // One step as the trainer takes it (bf16: under bf16 autocast, the weights fp32); returns the
  // batch's mean nll (nats per token).
  double step(bool bf16 = false);

  // B Q per segment, times the 1 + train.bptt_segments segments a step reads.
  std::int64_t tokens_per_step() const { return batch_size_ * tgt_len_ * unroll_; }

 private:
  config::ExperimentConfig config_;
  std::int64_t batch_size_, tgt_len_;
  std::int64_t unroll_ = 1;  // segments per step: 1 + train.bptt_segments
  models::TransformerLM model_{nullptr};
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<Step> fp32_, bf16_;  // one model and optimizer; each its own memory
  std::unique_ptr<data::TrainStream> stream_;
  std::int64_t steps_done_ = 0;
};

}  // namespace txl::train
