// Device hygiene, counted on the CPU build: DeviceTraffic sees every `.to(device)` LibTorch
// dispatches (a host-device copy on a GPU) and every `.item()` (a wait for the device). A
// training step moves its batch up and two numbers down; an evaluation reads its sum once,
// however long the text.
#include "txl/util/device_traffic.h"

#include "support/test_support.h"
#include "support/tiny_experiment.h"
#include "txl/eval/evaluator.h"
#include "txl/train/step.h"
#include "txl/train/trainer.h"

namespace {

using txl::DeviceTraffic;
using txl::DeviceTrafficCounts;

// The tensors of a data::Batch that Batch::to moves: tokens, targets, input_mask, target_mask,
// reset.
constexpr std::int64_t kBatchTensors = 5;

TEST(DeviceTraffic, CountsMovesAndReadsButNotHostOnlyWork) {
  const auto t = torch::randn({3, 4});  // [3, 4]
  DeviceTraffic traffic;
  (void)t.to(torch::kCPU);                  // a move (to the same device: still a call to count)
  (void)t.cpu();                            // a move
  (void)t.sum().item<double>();             // a read
  (void)t.to(torch::kDouble);               // a dtype change: no device, not counted
  (void)t.to(torch::kCPU, torch::kDouble);  // a move
  // LibTorch's own cast inside an operation (softmax's toType names the tensor's device, as
  // under CUDA autocast with bf16 scores): no move.
  (void)torch::softmax(t, -1, torch::kDouble);
  {
    TXL_HOST_ONLY_SCOPE();
    (void)t.max().item<float>();
    (void)t.to(torch::kCPU);
  }
  (void)t.min().item<float>();  // counting resumes after the scope
  EXPECT_EQ(traffic.counts().moves, 3);
  EXPECT_EQ(traffic.counts().reads, 2);
  // Each counted call, in order, with its inputs.
  const auto calls = traffic.calls();
  ASSERT_EQ(calls.size(), 5u);
  EXPECT_EQ(calls[0].rfind("aten::to(cpu Float [3, 4], ", 0), 0u) << calls[0];
  EXPECT_NE(calls[0].find(", cpu, "), std::string::npos) << calls[0];  // the device argument
  EXPECT_EQ(calls[2], "aten::_local_scalar_dense(cpu Float [])");
  EXPECT_EQ(calls[4], "aten::_local_scalar_dense(cpu Float [])");
}

TEST(DeviceTraffic, OnlyOneCounterAtATime) {
  DeviceTraffic first;
  TXL_EXPECT_THROW_WITH(DeviceTraffic second, "another counter is already running");
}

// Every step, whatever its chunking or precision: each chunk's tensors go to the device (one move
// each) and the loss and gradient norm come back together (one move); nothing is read with
// item(). Clipping, the chunks' token counts and the token-id checks cost no read.
TEST(DeviceTraffic, ATrainingStepMovesItsBatchUpAndTwoNumbersDownInOneCopy) {
  txl::test::TempDir dir;
  const auto c = txl::test::tiny_experiment(dir.path());
  for (const int chunks : {1, 2}) {
    for (const bool bf16 : {false, true}) {
      torch::manual_seed(5);
      txl::models::TransformerLM model(c.model, 30);
      auto optimizer = txl::train::make_optimizer(c.train, model->parameters());
      txl::train::StepSettings settings;
      settings.batch_chunk = chunks;
      settings.bf16 = bf16;
      settings.clip = 0.25;
      txl::train::Step step(model, *optimizer, settings, {0, 4});
      for (std::uint64_t s = 0; s < 3; ++s) {
        const auto batch = txl::test::random_batch(s);
        DeviceTraffic traffic;
        const auto r = step.run(batch, 1e-3);
        EXPECT_TRUE(std::isfinite(r.loss_sum) && r.grad_norm > 0);
        EXPECT_EQ(traffic.counts(), (DeviceTrafficCounts{kBatchTensors * chunks + 1, 0}))
            << "chunks " << chunks << ", bf16 " << bf16 << ", step " << s << ": moves "
            << traffic.counts().moves << ", reads " << traffic.counts().reads;
      }
    }
  }
}

// The traffic of one evaluation of `n` tokens, and the batches it read.
DeviceTrafficCounts evaluation_traffic(txl::models::TransformerLM& model, std::int64_t n,
                                       const txl::eval::Settings& settings, std::int64_t* batches) {
  txl::data::EncodedSplit split;
  split.ids = torch::randint(30, {n}, torch::kInt64);  // [n]
  txl::data::EvalStream stream(split.ids, txl::eval::eval_stream_options(settings));
  *batches = 0;
  while (stream.next()) ++*batches;
  DeviceTraffic traffic;
  const auto r = txl::eval::evaluate(model, split, settings);
  EXPECT_TRUE(std::isfinite(r.loss));
  return traffic.counts();
}

// Memory-mode evaluation: each batch moves its tensors up and nothing down; the sum is read
// once at the end, so a longer text adds moves (its batches) and no read.
TEST(DeviceTraffic, AnEvaluationReadsItsSumOnceHoweverLong) {
  txl::test::TempDir dir;
  const auto c = txl::test::tiny_experiment(dir.path());
  torch::manual_seed(7);
  txl::models::TransformerLM model(c.model, 30);
  txl::eval::Settings settings;
  settings.tgt_len = 8;
  settings.mem_len = 8;
  settings.batch_size = 2;
  std::int64_t short_batches = 0, long_batches = 0;
  const auto short_text = evaluation_traffic(model, 101, settings, &short_batches);
  const auto long_text = evaluation_traffic(model, 401, settings, &long_batches);
  ASSERT_GT(long_batches, short_batches);
  EXPECT_EQ(long_text.reads, short_text.reads);
  EXPECT_LE(long_text.reads, 1);
  EXPECT_EQ(long_text.moves - short_text.moves, kBatchTensors * (long_batches - short_batches));
}

}  // namespace
