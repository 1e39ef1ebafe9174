// train::Step (the one training step) and train::Schedule (what happens between steps).
#include "txl/train/step.h"

#include <cmath>
#include <limits>

#include "support/test_support.h"
#include "support/tiny_experiment.h"
#include "txl/train/schedule.h"
#include "txl/train/trainer.h"

namespace {

using txl::train::Schedule;
using txl::train::TrainState;

// A batch of 4 rows of 12 tokens of a 30-id vocabulary, the last 3 targets of row 2 padding.
txl::data::Batch batch_of_four() {
  torch::manual_seed(11);
  txl::data::Batch b;
  b.tokens = torch::randint(30, {4, 12}, torch::kInt64);   // [4, 12]
  b.targets = torch::randint(30, {4, 12}, torch::kInt64);  // [4, 12]
  b.input_mask = torch::ones({4, 12}, torch::kBool);        // [4, 12]
  b.target_mask = torch::ones({4, 12}, torch::kBool);       // [4, 12]
  b.target_mask[2].narrow(0, 9, 3).fill_(false);
  b.reset = torch::zeros({4}, torch::kBool);  // [4]
  b.n_scored = b.target_mask.sum().item<std::int64_t>();
  return b;
}

txl::config::ExperimentConfig no_dropout() {
  txl::test::TempDir unused;
  auto c = txl::test::tiny_experiment(unused.path());
  c.model.dropout = 0.0;
  return c;
}

// The step's loss is the mean over scored tokens; its gradient norm is the 2-norm over every
// parameter's gradient, before clipping; after clipping the gradient's norm is the clip.
TEST(Step, LossIsTheMaskedMeanAndTheNormIsMeasuredBeforeClipping) {
  const auto c = no_dropout();
  torch::manual_seed(3);
  txl::models::TransformerLM model(c.model, 30);
  auto optimizer = txl::train::make_optimizer(c.train, model->parameters());
  txl::train::StepSettings settings;
  settings.clip = 1e-3;
  txl::train::Step step(model, *optimizer, settings, {0, 4});
  const auto b = batch_of_four();
  const auto r = step.backward(b);
  torch::manual_seed(3);
  txl::models::TransformerLM twin(c.model, 30);
  auto out = twin->forward(txl::models::Inputs::of(b), {}, twin->default_context());
  auto loss = out.nll.masked_select(b.target_mask).mean();  // []
  loss.backward();
  double squares = 0.0;
  for (const auto& p : twin->parameters()) squares += p.grad().pow(2).sum().item<double>();
  EXPECT_EQ(r.scored, 45);
  EXPECT_NEAR(r.mean_loss(), loss.item<double>(), 1e-5);
  EXPECT_NEAR(r.grad_norm, std::sqrt(squares), 1e-4 * std::sqrt(squares));
  double clipped = 0.0;
  for (const auto& p : model->parameters()) clipped += p.grad().pow(2).sum().item<double>();
  EXPECT_NEAR(std::sqrt(clipped), 1e-3, 1e-6);
}

// Chunks of rows (gradient accumulation) give the gradient and memory of the whole batch.
TEST(Step, ChunksGiveTheWholeBatchsStep) {
  const auto c = no_dropout();
  std::vector<torch::Tensor> after[2];
  for (int chunks : {1, 2}) {
    torch::manual_seed(3);
    txl::models::TransformerLM model(c.model, 30);
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
    txl::train::StepSettings settings;
    settings.batch_chunk = chunks;
    txl::train::Step step(model, sgd, settings, {0, 4});
    step.run(batch_of_four(), 0.1);
    step.run(batch_of_four(), 0.1);  // with the memory of the first
    EXPECT_EQ(step.joined_memory().rows(), 4);
    for (const auto& p : model->parameters()) after[chunks - 1].push_back(p.detach().clone());
  }
  for (size_t i = 0; i < after[0].size(); ++i)
    EXPECT_TRUE(txl::test::tensor_near(after[1][i], after[0][i], 1e-6, 1e-5)) << i;
}

TEST(Schedule, StopReasonsInOrder) {
  txl::config::TrainConfig t;
  t.max_steps = 10;
  t.max_tokens = 100;
  Schedule s(t, 5);
  TrainState st;
  EXPECT_EQ(s.stop_reason(st, false, 0, 0), "");
  EXPECT_EQ(s.stop_reason(st, true, 0, 0), "max_minutes");
  EXPECT_EQ(s.stop_reason(st, false, 2, 0), "signal 2");
  st.step = 3;
  EXPECT_EQ(s.stop_reason(st, false, 0, 3), "pause_at_step");
  st.tokens = 100;
  EXPECT_EQ(s.stop_reason(st, true, 15, 3), "max_tokens");
  st.step = 10;
  EXPECT_EQ(s.stop_reason(st, true, 15, 3), "max_steps");
}

TEST(Schedule, CadenceOfLogsValidationsAndCheckpoints) {
  txl::config::TrainConfig t;
  t.max_steps = 12;
  t.eval_interval = 4;
  t.checkpoint_interval = 0;
  Schedule s(t, 5);
  EXPECT_TRUE(s.log_due(5));
  EXPECT_TRUE(s.log_due(12));  // the last step is always logged
  EXPECT_FALSE(s.log_due(6));
  EXPECT_TRUE(s.eval_due(8));
  EXPECT_FALSE(s.eval_due(6));
  EXPECT_FALSE(s.checkpoint_due(12));
}

// Only finite losses become the best; plateau decays after plateau_patience + 1 validations
// without gain; early stopping after `patience`.
TEST(Schedule, ValidationsMoveBestPlateauAndEarlyStop) {
  txl::config::TrainConfig t;
  t.schedule = txl::config::Schedule::kPlateau;
  t.plateau_patience = 1;
  t.decay_rate = 0.5;
  t.patience = 3;
  Schedule s(t, 5);
  TrainState st;
  st.step = 1;
  EXPECT_FALSE(s.record_validation(st, std::nan("")).improved);
  EXPECT_EQ(st.best_step, -1);
  st.step = 2;
  EXPECT_TRUE(s.record_validation(st, 5.0).improved);
  EXPECT_FALSE(s.record_validation(st, std::numeric_limits<double>::infinity()).improved);
  const auto second = s.record_validation(st, 6.0);
  EXPECT_TRUE(second.decayed);
  EXPECT_DOUBLE_EQ(st.lr_scale, 0.5);
  EXPECT_TRUE(s.record_validation(st, 5.5).early_stop);
  EXPECT_EQ(st.best_step, 2);
  EXPECT_DOUBLE_EQ(st.best_valid_loss, 5.0);
}

TEST(Schedule, EtaFollowsThePaceOfThisInvocation) {
  txl::config::TrainConfig t;
  t.max_steps = 100;
  Schedule s(t, 5);
  TrainState st;
  st.step = 60;  // resumed at 40, 20 steps in 10 s: 40 steps left at 2 steps/s
  EXPECT_DOUBLE_EQ(s.eta_seconds(st, 40, 0, 10.0, 30.0), 20.0);
  t.max_minutes = 0.5;  // 30 s in all, 30 s spent: nothing left
  Schedule timed(t, 5);
  EXPECT_DOUBLE_EQ(timed.eta_seconds(st, 40, 0, 10.0, 30.0), 0.0);
}

}  // namespace
