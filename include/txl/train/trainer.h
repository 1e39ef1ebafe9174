#pragma once
// The training loop. train() reads top to bottom (Trainer::run in src/train/trainer.cpp): run
// folder -> tokenizer and cached token ids -> ordered segment stream -> model, optimizer and
// train::Step (restored on resume) -> while train::Schedule finds no stop condition: step ->
// progress record -> validation -> checkpoint -> the final validation and checkpoint.
//
// What a run writes (rank 0 of a data-parallel job alone), into run_dir(config):
//   config.yaml                  the resolved experiment, written once the start is valid
//   metrics.jsonl                one JSON record per progress line and validation
//   checkpoint_last.safetensors  every train.checkpoint_interval steps and at the end
//   checkpoint_best.safetensors  at each validation that improved
// Checkpoints never hold non-finite weights; a diverging run stops naming a checkpoint whose
// weights gave a finite loss.

#include <torch/torch.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "txl/config/config.h"
#include "txl/dist/group.h"
#include "txl/train/run_folder.h"
#include "txl/util/stop.h"

namespace txl::train {

enum class TrainStatus {
  kCompleted,    // reached a stop condition (steps, tokens, minutes or early stop)
  kInterrupted,  // stopped by a signal or pause_at_step after checkpointing; resume with --resume
};

struct TrainSummary {
  TrainStatus status = TrainStatus::kCompleted;
  std::int64_t step = 0;         // optimizer steps done
  std::int64_t tokens = 0;       // training tokens seen
  double best_valid_loss = 0.0;  // best validation loss (nats per token), 0 if never evaluated
  std::int64_t best_step = -1;   // the step of checkpoint_best (-1 = none)
  double final_train_loss = std::nan("");  // mean loss of the last progress record (NaN = none)
  std::int64_t final_train_step = -1;      // its step
  double seconds = 0.0;                    // wall time of this invocation
  double total_seconds = 0.0;              // training wall time of every invocation of the run
  double tokens_per_s = 0.0;               // training throughput of this invocation
  std::int64_t params = 0;                 // the model's parameters
  std::string stop_reason;                 // e.g. "max_steps", "early stop", "signal 2"
  int signal = 0;                          // the signal that stopped training (any rank's), else 0
  std::filesystem::path run_dir;           // where everything was written
};

struct TrainOptions {
  StartMode start = StartMode::kNew;  // new run, --resume or --overwrite
  bool quiet = false;                 // no progress lines
  // Stop as a signal would once this step is reached (checkpoint, kInterrupted); 0 = never.
  // For time-sliced or preemptible jobs, and for tests of resumption.
  std::int64_t pause_at_step = 0;
  // A data-parallel job (dist::Group::create): each rank trains its slice of the batch's
  // streams, gradients are summed before every step, rank 0 alone writes logs, metrics and
  // checkpoints. Null = this process alone.
  std::shared_ptr<dist::Group> group = nullptr;
  // Rank 0 takes the run folder's lock (start_run) for the whole run and refuses a folder another
  // process writes. False when the caller holds that lock already (an ablation's job).
  bool lock = true;
};

// Trains the experiment. Throws txl::Error on user errors (naming the cause; no file of the run
// folder is touched when the start is refused, as when another process writes the run), and when
// training diverges: a non-finite loss or gradient norm, or a loss above train.divergence_factor x
// ln(vocabulary) for train.divergence_patience steps in a row (the message names the last good
// checkpoint).
TrainSummary train(const config::ExperimentConfig& config, const TrainOptions& options = {});

// The optimizer of train.optimizer (adam | adamw | sgd) with its options, over `params`.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const config::TrainConfig& train,
                                                        std::vector<torch::Tensor> params);

}  // namespace txl::train
