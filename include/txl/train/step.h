#pragma once
// One optimizer step over one global batch, written once: the trainer, txl-bench and the tests
// all take this step.
//
//   for each chunk of this rank's rows:   forward (autocast) -> nll summed over scored tokens
//                                         -> backward of sum / (scored tokens of the GLOBAL batch)
//   -> gradients summed over the ranks -> gradient norm measured (and clipped when clip > 0)
//   -> optimizer update at the given learning rate
//
// Dividing by the global batch's scored tokens makes the ranks' and chunks' gradients add up to
// exactly the gradient of the global batch's mean loss, however padding falls between them. The
// memory of this rank's rows (per chunk) is carried from step to step by the Step itself.
//
// Back-propagation through segments (train.bptt_segments = k): a step takes k + 1 consecutive
// global batches (an unroll). Each chunk reads its rows of them in order with the memory kept in
// the graph between them, and one backward of their summed loss (divided by the unroll's scored
// tokens) sends the gradient of each segment's loss back through the memory to the earlier
// segments of the unroll; the memory handed to the next step is detached.

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "txl/data/batch.h"
#include "txl/dist/group.h"
#include "txl/models/memory.h"
#include "txl/models/transformer_lm.h"

namespace txl::train {

struct StepSettings {
  torch::Device device = torch::kCPU;  // where the model and batches live
  bool bf16 = false;                   // bf16 autocast for forward and backward
  std::int64_t batch_chunk = 1;        // chunks of this rank's rows (gradient accumulation)
  double clip = 0.0;                   // gradient-norm clip; 0 = measure only
};

struct StepResult {
  double loss_sum = 0.0;    // summed nll over the global batch's scored tokens (every rank)
  std::int64_t scored = 0;  // scored tokens of the global batch
  double grad_norm = 0.0;   // total gradient norm before clipping (2-norm over parameters)
  double mean_loss() const {
    return loss_sum / static_cast<double>(std::max<std::int64_t>(scored, 1));
  }
};

class Step {
 public:
  // `rows`: this rank's rows of every global batch (all of them in one process). `group` null =
  // this process alone. The model and optimizer are shared with the caller.
  Step(models::TransformerLM model, torch::optim::Optimizer& optimizer,
       const StepSettings& settings, dist::RowRange rows,
       std::shared_ptr<dist::Group> group = nullptr);

  // Forward and backward of this rank's rows of `global`, chunk by chunk, the gradients summed
  // over the ranks, the norm measured and clipped. The weights are not changed yet: the caller
  // may look at the loss and norm first (the trainer checks them before anything is applied).
  StepResult backward(const data::Batch& global);
  // The same over an unroll of consecutive global batches, the gradient flowing back through
  // the memory between them (back-propagation through unroll.size() - 1 segments).
  StepResult backward(const std::vector<data::Batch>& unroll);

  // The optimizer update of the gradients backward() left, at learning rate `lr`.
  void update(double lr);

  // backward() then update(): the whole step.
  StepResult run(const data::Batch& global, double lr);
  StepResult run(const std::vector<data::Batch>& unroll, double lr);

  // This rank's memory, one entry per chunk (rows in order), as the next step will use it.
  std::vector<models::Memory>& memory() { return memory_; }
  const std::vector<models::Memory>& memory() const { return memory_; }
  // The memory of all of this rank's rows as one (chunks joined).
  models::Memory joined_memory() const { return models::Memory::join_rows(memory_); }
  // Sets this rank's memory from the rows [rows.begin, rows.end) of a global batch's memory.
  void set_memory(const models::Memory& global_memory);

  std::size_t gradient_buckets() const { return reducer_.buckets(); }

 private:
  // Chunk c's rows of every batch of the unroll, forward in order, one backward of their loss
  // summed and divided by `scored`; returns the summed nll [1] (detached).
  torch::Tensor chunk_backward(const std::vector<data::Batch>& rank_batches, std::int64_t c,
                               double scored);

  models::TransformerLM model_;
  torch::optim::Optimizer& optimizer_;
  StepSettings settings_;
  dist::RowRange rows_;
  std::shared_ptr<dist::Group> group_;
  dist::GradientReducer reducer_;
  models::Lookback lookback_;
  std::int64_t chunk_rows_ = 0;
  std::int64_t global_rows_ = 0;  // rows of the global batch being read (every rank's)
  std::vector<models::Memory> memory_;
};

}  // namespace txl::train
