#pragma once
// The trainer's state in a checkpoint: the bookkeeping that --resume needs to continue exactly
// (TrainState, a JSON object in the checkpoint's record) and the named tensors beside the
// model's weights:
//   optimizer/<parameter>/<field>   adam, adamw: step (int64 scalar), exp_avg, exp_avg_sq;
//                                   sgd: momentum_buffer (when momentum > 0)
//   memory/layer.<l>, memory/key_mask   the memory of every row of the global batch
//   rng/state                       uint8 [ranks, S]: each rank's dropout generator
// Everything is checked against the model and optimizer before anything is restored.

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "txl/config/config.h"
#include "txl/models/checkpoint.h"
#include "txl/models/memory.h"
#include "txl/models/transformer_lm.h"

namespace txl::train {

struct TrainState {
  std::int64_t step = 0;                // optimizer steps done
  std::int64_t tokens = 0;              // training tokens seen
  double lr_scale = 1.0;                // plateau schedule's current factor
  double best_valid_loss = 0.0;         // best finite validation loss; 0 = never evaluated
  std::int64_t best_step = -1;          // step of checkpoint_best (-1 = none)
  std::int64_t evals_without_gain = 0;  // for early stopping
  std::int64_t plateau_bad_evals = 0;   // evaluations since the last plateau decay
  std::int64_t diverging_steps = 0;     // consecutive steps whose loss exceeded the bound
  std::string stream_state;             // the training stream's serialised position
  double elapsed_seconds = 0.0;         // training wall time before this invocation
  std::int64_t last_eval_step = -1;     // step of the latest validation (-1 = none)
  double interval_loss = 0.0;           // summed loss since the last progress record
  std::int64_t interval_tokens = 0;     // scored tokens since the last progress record
  double last_train_loss = 0.0;         // mean loss of the latest progress record
  std::int64_t last_train_step = -1;    // its step (-1 = none yet)

  std::string to_json() const;
  // Throws txl::Error naming `origin` when a field is missing or of the wrong type.
  static TrainState from_json(const std::string& json, const std::string& origin);
};

// What a resumed run continues from.
struct ResumePoint {
  TrainState state;
  models::Memory memory;  // every row of the global batch, on the model's device
  torch::Tensor rng;      // uint8 [ranks, S] (CPU), or undefined when not saved
};

// A training checkpoint: `base` (a model checkpoint) plus the state, the memory of every row of
// the global batch, the ranks' generator states (uint8 [ranks, S]) and the optimizer's state.
void add_training_state(models::Checkpoint& base, const TrainState& state,
                        const models::Memory& memory, const torch::Tensor& rng,
                        const torch::optim::Optimizer& optimizer,
                        const models::TransformerLM& model);

// Restores model weights, optimizer state and the rest from a training checkpoint into objects
// built from `requested` (the experiment of this invocation). Before anything is restored it
// checks that the stored experiment may be resumed as `requested` (config::resume_conflicts:
// each refused change is listed with both values) and that every tensor fits. Throws
// txl::Error naming `origin`.
ResumePoint restore_training(const models::Checkpoint& checkpoint,
                             const config::ExperimentConfig& requested,
                             models::TransformerLM& model, torch::optim::Optimizer& optimizer,
                             const torch::Device& device, const std::string& origin);

}  // namespace txl::train
