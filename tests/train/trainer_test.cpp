#include "txl/train/trainer.h"

#include <signal.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "support/test_support.h"
#include "support/tiny_experiment.h"
#include "txl/config/load.h"
#include "txl/models/checkpoint.h"
#include "txl/util/fs.h"
#include "txl/util/log.h"

namespace {

namespace stdfs = std::filesystem;
using txl::test::TempDir;

// metrics.jsonl without the wall-clock fields, which differ between any two runs.
std::string metrics_without_timing(const stdfs::path& run) {
  static const std::regex timing(R"re(,?"(tokens_per_s|seconds)":[-0-9.e+]+)re");
  return std::regex_replace(txl::fs::read_file(run / "metrics.jsonl"), timing, "");
}

std::vector<torch::Tensor> parameters_of(const stdfs::path& checkpoint) {
  auto loaded = txl::models::load_model(checkpoint);
  std::vector<torch::Tensor> out;
  for (const auto& p : loaded.model->parameters()) out.push_back(p.detach().clone());
  return out;
}

TEST(Trainer, ResumeEqualsAnUninterruptedRun) {
  txl::log::set_level(txl::log::Level::kQuiet);
  TempDir dir;
  auto whole = txl::test::tiny_experiment(dir.path(), "whole");
  whole.train.checkpoint_interval = 7;  // not a multiple of log or eval intervals
  auto summary = txl::train::train(whole, {false, true});
  EXPECT_EQ(summary.step, 20);

  auto split = txl::test::tiny_experiment(dir.path(), "split");
  split.train.checkpoint_interval = 7;
  // Interrupted at step 8 (mid log and eval interval, after a periodic checkpoint), then at 13.
  txl::train::TrainOptions pause{false, true, 8};
  EXPECT_EQ(txl::train::train(split, pause).status, txl::train::TrainStatus::kInterrupted);
  pause = {true, true, 13};
  EXPECT_EQ(txl::train::train(split, pause).status, txl::train::TrainStatus::kInterrupted);
  auto resumed = txl::train::train(split, {true, true});
  EXPECT_EQ(resumed.step, 20);

  EXPECT_EQ(metrics_without_timing(dir / "runs/whole"), metrics_without_timing(dir / "runs/split"));
  auto a = parameters_of(dir / "runs/whole/checkpoint_last.pt");
  auto b = parameters_of(dir / "runs/split/checkpoint_last.pt");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(txl::test::tensor_equal(a[i], b[i])) << i;
  txl::log::set_level(txl::log::Level::kInfo);
}

TEST(Trainer, GradientAccumulationEqualsOneBatch) {
  txl::log::set_level(txl::log::Level::kQuiet);
  TempDir dir;
  auto one = txl::test::tiny_experiment(dir.path(), "one");
  one.model.dropout = 0.0;
  one.train.max_steps = 1;
  one.train.eval_interval = 0;
  one.train.optimizer = "sgd";  // an update proportional to the gradient: accumulation shows
  one.train.clip = 0;
  auto two = one;
  two.run.name = "two";
  two.run.output_dir = (dir / "runs/two").string();
  two.train.batch_chunk = 2;
  txl::train::train(one, {false, true});
  txl::train::train(two, {false, true});
  auto a = parameters_of(dir / "runs/one/checkpoint_last.pt");
  auto b = parameters_of(dir / "runs/two/checkpoint_last.pt");
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(txl::test::tensor_near(a[i], b[i], 1e-6, 1e-5)) << i;
  txl::log::set_level(txl::log::Level::kInfo);
}

TEST(Trainer, NonFiniteLossStopsNamingTheStepAndKeepsTheLastCheckpoint) {
  txl::log::set_level(txl::log::Level::kQuiet);
  TempDir dir;
  auto c = txl::test::tiny_experiment(dir.path(), "nan");
  c.train.optimizer = "sgd";
  c.train.schedule = "constant";
  c.train.warmup_steps = 0;
  c.train.lr = 1e30;  // the first update sends the weights to infinity
  c.train.clip = 0;
  c.train.checkpoint_interval = 1;
  c.train.eval_interval = 0;
  TXL_EXPECT_THROW_WITH(txl::train::train(c, {false, true}), "at step 2");
  const auto last = dir / "runs/nan/checkpoint_last.pt";
  ASSERT_TRUE(stdfs::exists(last));
  auto loaded = txl::models::load_model(last);  // intact and loadable
  EXPECT_EQ(loaded.config.train.lr, 1e30);
  txl::log::set_level(txl::log::Level::kInfo);
}

// Starts txl-train on `config_path` in `cwd`, waits for its first progress record, sends
// `sig`, and returns the exit status.
int interrupt_child(const stdfs::path& config_path, const stdfs::path& metrics, int sig) {
  const auto binary = txl::test::bin_dir() / "txl-train";
  pid_t pid = fork();
  if (pid == 0) {
    int null = ::open("/dev/null", O_WRONLY);
    dup2(null, 2);
    execl(binary.c_str(), binary.c_str(), "--config", config_path.c_str(), "--quiet", nullptr);
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    std::error_code ec;
    if (stdfs::exists(metrics) && stdfs::file_size(metrics, ec) > 0) break;
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return -1;  // ended before the signal
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, sig);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -2;
}

TEST(Trainer, SignalsCheckpointAndExitWith128PlusTheSignal) {
  TempDir dir;
  for (int sig : {SIGINT, SIGTERM}) {
    const std::string name = sig == SIGINT ? "sigint" : "sigterm";
    auto c = txl::test::tiny_experiment(dir.path(), name);
    c.train.max_steps = 1000000;
    c.train.eval_interval = 0;
    c.run.log_interval = 1;
    const auto config_path = dir / (name + ".yaml");
    txl::fs::write_atomic(config_path, txl::config::dump_experiment(c));
    const auto run = dir / "runs" / name;
    EXPECT_EQ(interrupt_child(config_path, run / "metrics.jsonl", sig), 128 + sig) << name;
    ASSERT_TRUE(stdfs::exists(run / "checkpoint_last.pt")) << name;
    auto loaded = txl::models::load_model(run / "checkpoint_last.pt");
    EXPECT_EQ(loaded.config.run.name, name);
  }
}

TEST(Trainer, RunDirDefaultsToRunsSlashName) {
  txl::config::ExperimentConfig c;
  c.run.name = "abc";
  EXPECT_EQ(txl::train::run_dir(c), stdfs::path("runs/abc"));
  c.run.output_dir = "/tmp/x";
  EXPECT_EQ(txl::train::run_dir(c), stdfs::path("/tmp/x"));
}

}  // namespace

// On a machine with a GPU (and a CUDA LibTorch): training on the GPU gives the CPU's losses, and
// a resume there is exact. Skipped elsewhere.
TEST(Trainer, TrainsOnTheGpuLikeOnTheCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA GPU";
  txl::log::set_level(txl::log::Level::kQuiet);
  TempDir dir;
  auto cpu = txl::test::tiny_experiment(dir.path(), "cpu");
  cpu.model.dropout = 0.0;  // the GPU draws other dropout masks
  auto gpu = cpu;
  gpu.run.name = "gpu";
  gpu.run.output_dir = (dir / "runs/gpu").string();
  gpu.run.device = "cuda";
  txl::train::train(cpu, {false, true});
  txl::train::train(gpu, {false, true});
  auto a = parameters_of(dir / "runs/cpu/checkpoint_last.pt");
  auto b = parameters_of(dir / "runs/gpu/checkpoint_last.pt");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(txl::test::tensor_near(b[i], a[i], 1e-4, 1e-3)) << i;

  auto whole = txl::test::tiny_experiment(dir.path(), "gpu_whole");  // dropout on
  whole.run.device = "cuda";
  auto split = txl::test::tiny_experiment(dir.path(), "gpu_split");
  split.run.device = "cuda";
  txl::train::train(whole, {false, true});
  txl::train::TrainOptions pause{false, true, 9};
  txl::train::train(split, pause);
  txl::train::train(split, {true, true});
  EXPECT_EQ(metrics_without_timing(dir / "runs/gpu_whole"), metrics_without_timing(dir / "runs/gpu_split"));
  txl::log::set_level(txl::log::Level::kInfo);
}
