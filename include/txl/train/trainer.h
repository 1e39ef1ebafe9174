#pragma once
// The training loop. Trainer::run reads top to bottom: config -> tokenizer -> cached token ids
// -> ordered segment stream -> model(tokens, memory) -> loss -> optimizer and schedule ->
// periodic evaluation -> checkpoint.

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <string>

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "txl/config/config.h"
#include "txl/dist/group.h"

namespace txl::train {

// Set by the binaries' SIGINT / SIGTERM handlers (the signal number); the trainer finishes the
// step in flight, writes a checkpoint and returns TrainStatus::kInterrupted.
std::atomic<int>& stop_signal();

// Installs SIGINT and SIGTERM handlers that set stop_signal() (for the programs); a second
// signal ends the process at once.
void install_stop_handlers();

enum class TrainStatus {
  kCompleted,    // reached a stop condition (steps, tokens, minutes or early stop)
  kInterrupted,  // stopped by a signal after checkpointing; resume with --resume
};

struct TrainSummary {
  TrainStatus status = TrainStatus::kCompleted;
  std::int64_t step = 0;          // optimizer steps done
  std::int64_t tokens = 0;        // training tokens seen
  double best_valid_loss = 0.0;   // best validation loss (nats per token), 0 if never evaluated
  double seconds = 0.0;           // wall time of this invocation
  double tokens_per_s = 0.0;      // training throughput of this invocation
  std::string stop_reason;        // e.g. "max_steps", "early stop", "signal 2"
  int signal = 0;                 // the signal that stopped training (any rank's), else 0
  std::filesystem::path run_dir;  // where everything was written
};

struct TrainOptions {
  bool resume = false;  // continue from run_dir/checkpoint_last.pt if it exists
  bool quiet = false;   // no progress lines
  // Stop as a signal would once this step is reached (checkpoint, kInterrupted); 0 = never.
  // For time-sliced or preemptible jobs, and for tests of resumption.
  std::int64_t pause_at_step = 0;
  // A data-parallel job (dist::Group::create): each rank trains its slice of the batch's
  // streams, gradients are summed before every step, rank 0 alone writes logs, metrics and
  // checkpoints. Null = this process alone.
  std::shared_ptr<dist::Group> group = nullptr;
};

// Trains the experiment; writes config.yaml, metrics.jsonl and checkpoints (checkpoint_last.pt,
// checkpoint_best.pt) into the run directory. Throws txl::Error on user errors, and on a NaN or
// infinite loss (naming the step; the last good checkpoint is left intact).
TrainSummary train(const config::ExperimentConfig& config, const TrainOptions& options = {});

// The optimizer of train.optimizer (adam | adamw | sgd) with its options, over `params`.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const config::TrainConfig& train,
                                                        std::vector<torch::Tensor> params);

// The run directory of an experiment: run.output_dir, or runs/<run.name>.
std::filesystem::path run_dir(const config::ExperimentConfig& config);

}  // namespace txl::train
