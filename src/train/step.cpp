#include "txl/train/step.h"

#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "txl/ops/projection.h"
#include "txl/util/autocast.h"
#include "txl/util/error.h"

namespace txl::train {

namespace {

std::shared_ptr<dist::Group> or_alone(std::shared_ptr<dist::Group> group) {
  return group ? std::move(group) : std::make_shared<dist::Group>();
}

// torch::nn::utils::clip_grad_norm_ without its host read: the total 2-norm of the gradients
// (a tensor on their device) and the gradients scaled by min(1, max_norm / (norm + 1e-6)).
torch::Tensor clip_gradients(const std::vector<torch::Tensor>& params, double max_norm,
                             const torch::Device& device) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads, norms;
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;
    grads.push_back(p.grad());
    norms.push_back(p.grad().norm(2));  // []
  }
  if (grads.empty())
    return torch::zeros({}, torch::TensorOptions(torch::kDouble).device(device));  // []
  const torch::Tensor total = torch::stack(norms).norm(2);                         // []
  if (std::isfinite(max_norm)) {
    const torch::Tensor coef = (max_norm / (total + 1e-6)).clamp_max(1.0);  // []
    for (auto& g : grads) g.mul_(coef);
  }
  return total;
}

}  // namespace

Step::Step(models::TransformerLM model, torch::optim::Optimizer& optimizer,
           const StepSettings& settings, dist::RowRange rows, std::shared_ptr<dist::Group> group)
    : model_(std::move(model)),
      optimizer_(optimizer),
      settings_(settings),
      rows_(rows),
      group_(or_alone(std::move(group))),
      reducer_(group_, model_->parameters()),
      lookback_(models::Lookback::from_config(model_->config())) {
  TXL_CHECK(settings.batch_chunk >= 1 && rows.size() % settings.batch_chunk == 0,
            "train.batch_chunk = ", settings.batch_chunk, " must divide the rows of each process (",
            rows.size(), ")");
  chunk_rows_ = rows.size() / settings.batch_chunk;
  memory_.resize(static_cast<size_t>(settings.batch_chunk));
}

StepResult Step::backward(const data::Batch& global) {
  return backward(std::vector<data::Batch>{global});
}

torch::Tensor Step::chunk_backward(const std::vector<data::Batch>& rank_batches, std::int64_t c,
                                   double scored) {
  auto& memory = memory_[static_cast<size_t>(c)];
  models::Lookback lookback = lookback_;
  lookback.memory_grad = rank_batches.size() > 1;
  torch::Tensor nll_sum;  // [] over the chunk's scored tokens of every batch of the unroll
  torch::Tensor aux;      // [] the model's auxiliary losses (compressive memory), summed
  for (const auto& batch : rank_batches) {
    const data::Batch chunk = batch.narrow_rows(c * chunk_rows_, chunk_rows_).to(settings_.device);
    AutocastGuard autocast(settings_.bf16, settings_.device);
    auto out = model_->forward(models::Inputs::of(chunk), memory, lookback);
    auto sum = out.nll.to(torch::kFloat).masked_fill(chunk.target_mask.logical_not(), 0.0).sum();
    nll_sum = nll_sum.defined() ? nll_sum + sum : sum;
    if (out.aux_loss.defined()) aux = aux.defined() ? aux + out.aux_loss : out.aux_loss;
    memory = std::move(out.memory);
  }
  if (lookback.memory_grad) memory = memory.detached();  // the next step's gradient stops here
  auto objective = nll_sum / scored;
  // Compressive memory's reconstruction loss, which reaches only the compressors: its mean over
  // the step's segments and rows (this chunk's share of the rows).
  if (aux.defined()) {
    objective = objective +
                aux.to(torch::kFloat) * (static_cast<double>(chunk_rows_) /
                                         (static_cast<double>(global_rows_) * rank_batches.size()));
  }
  objective.backward();
  return nll_sum.detach().to(torch::kDouble).reshape({1});  // [1]
}

// On the CPU in fp32 the step's products run on OpenBLAS's threads and LibTorch's loops on one
// (ops::ProductThreads): two pools taking turns on the cores made a step of the default job's
// model at 2 threads 1.4x slower (docs/performance.md, 2026-12-07, third entry).

StepResult Step::backward(const std::vector<data::Batch>& unroll) {
  TXL_CHECK(!unroll.empty(), "training step: no batch to read");
  std::optional<ops::ProductThreads> threads;
  if (ops::products_on_blas_threads(settings_.device, settings_.bf16)) threads.emplace();
  // This rank's rows, and each chunk's, are cut on the host (counting their scored tokens
  // there) and moved to the device chunk by chunk.
  std::vector<data::Batch> rank_batches;
  std::int64_t n_scored = 0;
  global_rows_ = unroll.front().tokens.size(0);
  for (const auto& global : unroll) {
    rank_batches.push_back(global.narrow_rows(rows_.begin, rows_.size()));
    n_scored += global.n_scored;
  }
  // Gradients are reset rather than zero-filled (LibTorch 1.13's zero_grad fills): the first
  // backward then writes them without a read-modify-write.
  for (auto& p : model_->parameters()) p.mutable_grad().reset();
  const double scored = static_cast<double>(std::max<std::int64_t>(n_scored, 1));
  torch::Tensor loss_sum =
      torch::zeros({1}, torch::TensorOptions(torch::kDouble).device(settings_.device));  // [1]
  for (std::int64_t c = 0; c < settings_.batch_chunk; ++c) {
    loss_sum += chunk_backward(rank_batches, c, scored);
  }
  if (group_->distributed()) {
    group_->all_reduce(loss_sum);
    reducer_.reduce();
  }
  const double max_norm =
      settings_.clip > 0 ? settings_.clip : std::numeric_limits<double>::infinity();
  const torch::Tensor norm =
      clip_gradients(model_->parameters(), max_norm, settings_.device);  // []
  // The step's one read from the device: the loss and the norm the divergence guard checks
  // before the update.
  const torch::Tensor both =
      torch::cat({loss_sum, norm.to(torch::kDouble).reshape({1})}).to(torch::kCPU);  // [2]
  const double* values = both.data_ptr<double>();
  return {values[0], n_scored, values[1]};
}

void Step::update(double lr) {
  std::optional<ops::ProductThreads> threads;  // as in backward
  if (ops::products_on_blas_threads(settings_.device, settings_.bf16)) threads.emplace();
  for (auto& group : optimizer_.param_groups()) group.options().set_lr(lr);
  optimizer_.step();
}

StepResult Step::run(const data::Batch& global, double lr) {
  return run(std::vector<data::Batch>{global}, lr);
}

StepResult Step::run(const std::vector<data::Batch>& unroll, double lr) {
  const StepResult result = backward(unroll);
  update(lr);
  return result;
}

void Step::set_memory(const models::Memory& global_memory) {
  for (std::int64_t c = 0; c < settings_.batch_chunk; ++c)
    memory_[static_cast<size_t>(c)] =
        global_memory.narrow_rows(rows_.begin + c * chunk_rows_, chunk_rows_);
}

}  // namespace txl::train
