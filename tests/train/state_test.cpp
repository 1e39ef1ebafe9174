// The trainer's state in a checkpoint: TrainState as JSON, the optimizer's state by parameter
// name, and the checks made before anything is restored.
#include "txl/train/state.h"

#include "support/test_support.h"
#include "support/tiny_experiment.h"
#include "txl/train/trainer.h"

namespace {

// The model's inputs for next-token prediction of `tokens` against `targets` (every token real).
txl::models::Inputs inputs_of(const torch::Tensor& tokens, const torch::Tensor& targets) {
  txl::models::Inputs inputs;
  inputs.tokens = tokens;    // int64 [B, T]
  inputs.targets = targets;  // int64 [B, T]
  return inputs;
}

using txl::test::TempDir;

TEST(TrainState, JsonRoundTripKeepsEveryField) {
  txl::train::TrainState s;
  s.step = 11;
  s.tokens = 1234;
  s.lr_scale = 0.25;
  s.best_valid_loss = 3.5;
  s.best_step = 10;
  s.evals_without_gain = 2;
  s.plateau_bad_evals = 1;
  s.diverging_steps = 3;
  s.stream_state = "epoch=1;offsets=1,2,3";
  s.elapsed_seconds = 9.75;
  s.last_eval_step = 10;
  s.interval_loss = 17.125;
  s.interval_tokens = 99;
  const auto r = txl::train::TrainState::from_json(s.to_json(), "t");
  EXPECT_EQ(r.to_json(), s.to_json());
  EXPECT_EQ(r.stream_state, s.stream_state);
  EXPECT_EQ(r.diverging_steps, 3);
  TXL_EXPECT_THROW_WITH(txl::train::TrainState::from_json(R"({"step":1})", "ckpt"), "ckpt");
  TXL_EXPECT_THROW_WITH(txl::train::TrainState::from_json("[1,2]", "ckpt"), "not a JSON object");
}

// Three steps, a checkpoint through bytes, a fresh model and optimizer restored from it: the
// next step gives bit-identical weights to the original's next step.
using txl::config::Optimizer;

void expect_exact_continuation(Optimizer optimizer_kind, double momentum) {
  TempDir dir;
  auto config = txl::test::tiny_experiment(dir.path());
  config.train.optimizer = optimizer_kind;
  config.train.momentum = momentum;
  config.model.dropout = 0.0;
  torch::manual_seed(7);
  txl::models::TransformerLM model(config.model, 30);
  auto optimizer = txl::train::make_optimizer(config.train, model->parameters());
  auto tokens = torch::randint(30, {2, 12}, torch::kInt64);  // [2, 12]
  auto one_step = [&](txl::models::TransformerLM& m, torch::optim::Optimizer& o) {
    o.zero_grad();
    m->forward(inputs_of(tokens, tokens), {}, m->default_lookback()).nll.mean().backward();
    o.step();
  };
  for (int i = 0; i < 3; ++i) one_step(model, *optimizer);

  auto checkpoint = txl::models::model_checkpoint(config, model, *txl::test::word_tokenizer());
  txl::train::TrainState state;
  state.step = 3;
  txl::train::add_training_state(checkpoint, state, {}, {}, *optimizer, model);
  const auto parsed =
      txl::models::parse_checkpoint(txl::models::serialize_checkpoint(checkpoint), "c");

  torch::manual_seed(8);  // other initial weights: everything must come from the checkpoint
  txl::models::TransformerLM restored(config.model, 30);
  auto restored_optimizer = txl::train::make_optimizer(config.train, restored->parameters());
  auto point =
      txl::train::restore_training(parsed, config, restored, *restored_optimizer, torch::kCPU, "c");
  EXPECT_EQ(point.state.step, 3);
  one_step(model, *optimizer);
  one_step(restored, *restored_optimizer);
  auto a = model->parameters(), b = restored->parameters();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(txl::test::tensor_equal(b[i], a[i])) << optimizer_kind << " " << i;
}

TEST(TrainState, AdamStateContinuesExactly) { expect_exact_continuation(Optimizer::kAdam, 0.0); }
TEST(TrainState, AdamWStateContinuesExactly) { expect_exact_continuation(Optimizer::kAdamW, 0.0); }
TEST(TrainState, SgdMomentumContinuesExactly) { expect_exact_continuation(Optimizer::kSgd, 0.9); }

TEST(TrainState, RefusedChangesAreListedBeforeAnythingIsRestored) {
  TempDir dir;
  auto config = txl::test::tiny_experiment(dir.path());
  torch::manual_seed(7);
  txl::models::TransformerLM model(config.model, 30);
  auto optimizer = txl::train::make_optimizer(config.train, model->parameters());
  auto checkpoint = txl::models::model_checkpoint(config, model, *txl::test::word_tokenizer());
  txl::train::add_training_state(checkpoint, {}, {}, {}, *optimizer, model);

  auto changed = config;
  changed.model.dropout = 0.3;
  changed.train.lr = 0.5;
  torch::manual_seed(8);
  txl::models::TransformerLM other(config.model, 30);
  const auto before = other->parameters().front().clone();
  auto other_optimizer = txl::train::make_optimizer(changed.train, other->parameters());
  TXL_EXPECT_THROW_WITH(
      txl::train::restore_training(checkpoint, changed, other, *other_optimizer, torch::kCPU, "c"),
      "model.dropout: 0.1 -> 0.3");
  TXL_EXPECT_THROW_WITH(
      txl::train::restore_training(checkpoint, changed, other, *other_optimizer, torch::kCPU, "c"),
      "train.lr");
  EXPECT_TRUE(txl::test::tensor_equal(other->parameters().front(), before));
  auto model_only = txl::models::model_checkpoint(config, model, *txl::test::word_tokenizer());
  TXL_EXPECT_THROW_WITH(
      txl::train::restore_training(model_only, config, other, *other_optimizer, torch::kCPU, "c"),
      "cannot be resumed");
}

}  // namespace
