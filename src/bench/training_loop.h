#pragma once
// The trainer's step on random token ids, shared by the throughput measurement and the profile.
// Private to src/bench.

#include <torch/torch.h>

#include <cstdint>
#include <memory>

#include "txl/bench/measure.h"
#include "txl/config/config.h"
#include "txl/data/stream.h"
#include "txl/models/transformer_lm.h"

namespace txl::bench::detail {

// int64 [n] ids drawn uniformly from [0, vocab) with their own generator (seeded), so the data
// does not depend on what else ran before in the process.
torch::Tensor random_ids(std::int64_t n, std::int64_t vocab, std::uint64_t seed);

// The trainer's step (config.model, config.train) on random ids, with memory carried over.
class TrainingLoop {
 public:
  // Builds the model (seeded), the optimizer of config.train and a TrainStream over enough
  // random ids for `steps` steps of B x Q (the stream wraps around after that).
  TrainingLoop(const config::ExperimentConfig& config, std::int64_t vocab,
               const PhaseOptions& options, std::int64_t steps);

  // One step as Trainer::run takes it; returns the batch's mean nll (nats per token).
  double step();

  std::int64_t tokens_per_step() const { return batch_size_ * tgt_len_; }

 private:
  config::ExperimentConfig config_;
  bool bf16_;
  std::int64_t batch_size_, tgt_len_;
  models::TransformerLM model_{nullptr};
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<data::TrainStream> stream_;
  models::Context context_;
  models::Memory memory_;
};

}  // namespace txl::bench::detail
