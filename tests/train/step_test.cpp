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
  b.input_mask = torch::ones({4, 12}, torch::kBool);       // [4, 12]
  b.target_mask = torch::ones({4, 12}, torch::kBool);      // [4, 12]
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
  auto out = twin->forward(txl::models::Inputs::of(b), {}, twin->default_lookback());
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

// Back-propagation through one segment: a step over two consecutive segments of 12 tokens with a
// memory of 12 gives the loss and the gradient of one pass over the 24 tokens (the second
// segment sees the first whole, through its memory, and its loss reaches the first segment's
// computation through that memory); with the stop-gradient the gradient differs. The memory
// handed on is detached. The model is double, but the step sums its losses in float (as it
// does in training), so the two agree to float's precision.
TEST(Step, BackPropagationThroughSegmentsIsTheGradientOfOneLongPass) {
  auto c = no_dropout();
  c.model.tgt_len = 12;
  c.model.mem_len = 12;
  const auto first = batch_of_four();
  txl::data::Batch second = first;
  torch::manual_seed(12);
  second.tokens = torch::randint(30, {4, 12}, torch::kInt64);   // [4, 12]
  second.targets = torch::randint(30, {4, 12}, torch::kInt64);  // [4, 12]
  auto gradients = [&](bool through_memory, double* loss) {
    torch::manual_seed(3);
    txl::models::TransformerLM model(c.model, 30);
    model->to(torch::kDouble);
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
    txl::train::Step step(model, sgd, txl::train::StepSettings{}, {0, 4});
    if (through_memory) {
      *loss = step.backward(std::vector<txl::data::Batch>{first, second}).mean_loss();
      EXPECT_FALSE(step.memory()[0].layers[0].requires_grad());
      EXPECT_EQ(step.memory()[0].length(), 12);
    } else {  // the same loss, the paper's stop-gradient between the segments
      const auto ctx = model->default_lookback();
      const auto one = model->forward(txl::models::Inputs::of(first), {}, ctx);
      const auto two = model->forward(txl::models::Inputs::of(second), one.memory, ctx);
      const auto sum = one.nll.masked_select(first.target_mask).sum() +
                       two.nll.masked_select(second.target_mask).sum();
      const auto mean = sum / static_cast<double>(first.n_scored + second.n_scored);
      mean.backward();
      *loss = mean.item<double>();
    }
    std::vector<torch::Tensor> out;
    for (const auto& p : model->parameters()) out.push_back(p.grad().clone());
    return out;
  };
  double unrolled_loss = 0, stopped_loss = 0;
  const auto unrolled = gradients(true, &unrolled_loss);
  const auto stopped = gradients(false, &stopped_loss);

  torch::manual_seed(3);
  txl::models::TransformerLM whole(c.model, 30);
  whole->to(torch::kDouble);
  txl::models::Inputs in;
  in.tokens = torch::cat({first.tokens, second.tokens}, 1);     // [4, 24]
  in.targets = torch::cat({first.targets, second.targets}, 1);  // [4, 24]
  auto ctx = whole->default_lookback();
  ctx.mem_len = 0;
  const auto nll = whole->forward(in, {}, ctx).nll;                          // [4, 24]
  const auto mask = torch::cat({first.target_mask, second.target_mask}, 1);  // [4, 24]
  const auto loss = nll.masked_select(mask).mean();
  loss.backward();
  EXPECT_NEAR(unrolled_loss, loss.item<double>(), 1e-6);
  EXPECT_NEAR(stopped_loss, loss.item<double>(), 1e-12);  // the forward is the same
  double gap = 0;
  const auto params = whole->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(txl::test::tensor_near(unrolled[i], params[i].grad(), 1e-9, 1e-6)) << i;
    gap = std::max(gap, (stopped[i] - params[i].grad()).abs().max().item<double>());
  }
  EXPECT_GT(gap, 1e-4) << "the stop-gradient gave the long pass's gradient: nothing was tested";
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
