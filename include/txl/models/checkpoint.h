#pragma once
// Self-describing checkpoints: one file holds the format version, the resolved experiment
// (YAML), the vocabulary size, the model parameters and, for resuming, the optimizer, schedule,
// step, stream position, memory and RNG states. Written atomically (temp file + rename).

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "txl/config/config.h"
#include "txl/models/transformer_lm.h"

namespace txl::models {

inline constexpr std::int64_t kCheckpointVersion = 1;

// Everything a checkpoint holds besides the model and optimizer tensors.
struct TrainState {
  std::int64_t step = 0;             // optimizer steps done
  std::int64_t tokens = 0;           // training tokens seen
  double lr_scale = 1.0;             // plateau schedule's current factor
  double best_valid_loss = 0.0;      // 0 = never evaluated
  std::int64_t evals_without_gain = 0;  // for early stopping and plateau decay
  std::int64_t plateau_bad_evals = 0;   // evaluations since the last plateau decay
  std::string stream_state;          // the training stream's serialised position
  std::vector<torch::Tensor> memory; // per batch chunk: layer tensors then key mask
  torch::Tensor rng_state;           // dropout's generator state (CPU or GPU), one row per rank
  double elapsed_seconds = 0.0;      // training wall time before this invocation
  std::int64_t last_eval_step = -1;  // step of the latest validation (-1 = none)
  double interval_loss = 0.0;        // summed loss since the last progress record
  std::int64_t interval_tokens = 0;  // scored tokens since the last progress record
};

// Writes model (+ optimizer and state when given) to `path` atomically.
void save_checkpoint(const std::filesystem::path& path, const config::ExperimentConfig& config,
                     std::int64_t vocab_size, TransformerLM& model,
                     torch::optim::Optimizer* optimizer, const TrainState* state);

struct LoadedModel {
  config::ExperimentConfig config;  // the experiment the model was trained with
  std::int64_t vocab_size = 0;
  TransformerLM model{nullptr};
};

// Rebuilds the model from the checkpoint alone. Throws txl::Error naming the file when it is
// missing, truncated, of another format version, or not a txl checkpoint.
LoadedModel load_model(const std::filesystem::path& path);

// Restores optimizer and training state into existing objects (for --resume); the model and
// optimizer live on `device`, and so will the memory tensors.
TrainState load_train_state(const std::filesystem::path& path, TransformerLM& model,
                            torch::optim::Optimizer& optimizer,
                            const torch::Device& device = torch::kCPU);

}  // namespace txl::models
