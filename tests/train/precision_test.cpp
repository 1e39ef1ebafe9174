// run.precision: auto (train/precision.h): what the probe decides and measures, that it leaves the
// process's random numbers as they were, and that a run stores its answer and a resume keeps it.

#include "txl/train/precision.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "support/process_as_program.h"
#include "support/test_support.h"
#include "support/tiny_experiment.h"
#include "txl/config/load.h"
#include "txl/train/random_steps.h"
#include "txl/train/trainer.h"
#include "txl/util/cpu.h"
#include "txl/util/fs.h"
#include "txl/util/log.h"

namespace {

const auto* const kProcess =
    ::testing::AddGlobalTestEnvironment(new txl::test::ProcessAsProgram(1));

namespace stdfs = std::filesystem;
using txl::config::Precision;
using txl::test::TempDir;

constexpr std::int64_t kVocab = 30;

Precision stored_precision(const stdfs::path& run) {
  const auto path = run / "config.yaml";
  return txl::config::parse_experiment_string(txl::fs::read_file(path), path.string())
      .run.precision;
}

TEST(Precision, TheChoiceFollowsTheMeasuredSpeedOrTheLackOfNativeBf16) {
  TempDir dir;
  const auto config = txl::test::tiny_experiment(dir.path());
  const auto choice = txl::train::choose_precision(config, kVocab, torch::kCPU, 4);
  ASSERT_NE(choice.precision, Precision::kAuto);
  EXPECT_FALSE(choice.reason.empty());
  if (!txl::util::cpu_features().bf16) {  // nothing measured: fp32, and the log says why
    EXPECT_FALSE(txl::train::native_bf16(torch::kCPU));
    EXPECT_EQ(choice.precision, Precision::kFp32);
    EXPECT_EQ(choice.fp32_seconds, 0.0);
    EXPECT_NE(choice.reason.find("no native bf16"), std::string::npos) << choice.reason;
  } else {  // both measured, and bf16 exactly where it is 1.3x faster
    EXPECT_TRUE(txl::train::native_bf16(torch::kCPU));
    ASSERT_GT(choice.fp32_seconds, 0.0);
    ASSERT_GT(choice.bf16_seconds, 0.0);
    const bool faster = choice.fp32_seconds >= txl::train::kBf16MinSpeedup * choice.bf16_seconds;
    EXPECT_EQ(choice.precision, faster ? Precision::kBf16 : Precision::kFp32) << choice.reason;
  }
}

TEST(Precision, TheProbeLeavesTheRandomNumbersAsTheyWere) {
  TempDir dir;
  const auto config = txl::test::tiny_experiment(dir.path());
  torch::manual_seed(7);
  const torch::Tensor expected = torch::rand({16});
  torch::manual_seed(7);
  txl::train::choose_precision(config, kVocab, torch::kCPU, 4);
  EXPECT_TRUE(torch::equal(torch::rand({16}), expected));
  // The control: the same steps without the probe's care draw from the process's generator.
  torch::manual_seed(7);
  txl::train::RandomStepsOptions options;
  options.batch_size = 4;
  txl::train::RandomSteps steps(config, kVocab, options, 1);
  steps.step();
  EXPECT_FALSE(torch::equal(torch::rand({16}), expected));
}

// Whatever this CPU resolves auto to, the run is the run that asked for that precision: the
// same losses to the bit (the probe draws nothing the run would draw), and it is stored.
TEST(Precision, ARunResolvesAutoOnceStoresItAndIsTheRunThatAskedForIt) {
  txl::log::ScopedLevel quiet(txl::log::Level::kQuiet);
  TempDir dir;
  auto asked_auto = txl::test::tiny_experiment(dir.path(), "auto");
  asked_auto.train.max_steps = 6;
  asked_auto.run.precision = Precision::kAuto;
  const auto a = txl::train::train(asked_auto, txl::test::quiet_run());
  const Precision chosen = stored_precision(dir / "runs/auto");
  ASSERT_NE(chosen, Precision::kAuto);

  auto asked = txl::test::tiny_experiment(dir.path(), "explicit");
  asked.train.max_steps = 6;
  asked.run.precision = chosen;
  const auto b = txl::train::train(asked, txl::test::quiet_run());
  EXPECT_EQ(a.final_train_loss, b.final_train_loss);
  EXPECT_EQ(a.best_valid_loss, b.best_valid_loss);
  EXPECT_EQ(stored_precision(dir / "runs/explicit"), chosen);
}

TEST(Precision, AResumeOfAutoKeepsThePrecisionTheRunWasTrainedWith) {
  txl::log::ScopedLevel quiet(txl::log::Level::kQuiet);
  TempDir dir;
  auto config = txl::test::tiny_experiment(dir.path(), "run");
  config.train.checkpoint_interval = 3;
  config.run.precision = Precision::kAuto;
  auto pause = txl::test::quiet_run(txl::train::StartMode::kNew, 4);
  ASSERT_EQ(txl::train::train(config, pause).status, txl::train::TrainStatus::kInterrupted);
  const Precision chosen = stored_precision(dir / "runs/run");
  ASSERT_NE(chosen, Precision::kAuto);
  const auto resumed =
      txl::train::train(config, txl::test::quiet_run(txl::train::StartMode::kResume));
  EXPECT_EQ(resumed.step, 20);
  EXPECT_EQ(stored_precision(dir / "runs/run"), chosen);
  // Asking for the other precision by name is refused, as any change of a fixed setting.
  config.run.precision = chosen == Precision::kBf16 ? Precision::kFp32 : Precision::kBf16;
  TXL_EXPECT_THROW_WITH(
      txl::train::train(config, txl::test::quiet_run(txl::train::StartMode::kResume)),
      "run.precision");
}

}  // namespace
