// Tests of the CUDA paths, labelled `gpu` (`ctest -L gpu`, which tools/gpu_check.sh runs). Each
// skips without a CUDA GPU; the logic they share with the CPU is tested on the CPU elsewhere
// (trainer_test, device_traffic_test).
#include <nlohmann/json.hpp>

#include <sstream>

#include "support/test_support.h"
#include "support/tiny_experiment.h"
#include "txl/eval/evaluator.h"
#include "txl/models/checkpoint.h"
#include "txl/train/step.h"
#include "txl/train/trainer.h"
#include "txl/util/device_traffic.h"
#include "txl/util/fs.h"
#include "txl/util/log.h"

namespace {

namespace stdfs = std::filesystem;
using txl::test::TempDir;

#define TXL_SKIP_WITHOUT_GPU() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA GPU"

// metrics.jsonl without its timing fields.
std::string metrics_without_timing(const stdfs::path& run) {
  std::istringstream in(txl::fs::read_file(run / "metrics.jsonl"));
  std::string line, out;
  while (std::getline(in, line)) {
    auto record = nlohmann::json::parse(line);
    record.erase("tokens_per_s");
    record.erase("seconds");
    out += record.dump() + "\n";
  }
  return out;
}

std::vector<torch::Tensor> parameters_of(const stdfs::path& checkpoint,
                                         const torch::Device& device = torch::kCPU) {
  auto loaded = txl::models::load_model(checkpoint, device);
  std::vector<torch::Tensor> out;
  for (const auto& p : loaded.model->parameters()) out.push_back(p.detach().clone());
  return out;
}

// Training on the GPU gives the CPU's losses, and a resume there is exact.
TEST(Gpu, TrainsOnTheGpuLikeOnTheCpu) {
  TXL_SKIP_WITHOUT_GPU();
  txl::log::ScopedLevel quiet(txl::log::Level::kQuiet);
  TempDir dir;
  auto cpu = txl::test::tiny_experiment(dir.path(), "cpu");
  cpu.model.dropout = 0.0;  // the GPU draws other dropout masks
  auto gpu = cpu;
  gpu.run.name = "gpu";
  gpu.run.output_dir = (dir / "runs/gpu").string();
  gpu.run.device = txl::config::Device::kCuda;
  txl::train::train(cpu, txl::test::quiet_run());
  txl::train::train(gpu, txl::test::quiet_run());
  auto a = parameters_of(dir / "runs/cpu/checkpoint_last.safetensors");
  auto b = parameters_of(dir / "runs/gpu/checkpoint_last.safetensors");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(txl::test::tensor_near(b[i], a[i], 1e-4, 1e-3)) << i;

  auto whole = txl::test::tiny_experiment(dir.path(), "gpu_whole");  // dropout on
  whole.run.device = txl::config::Device::kCuda;
  auto split = txl::test::tiny_experiment(dir.path(), "gpu_split");
  split.run.device = txl::config::Device::kCuda;
  txl::train::train(whole, txl::test::quiet_run());
  auto pause = txl::test::quiet_run(txl::train::StartMode::kNew, 9);
  txl::train::train(split, pause);
  txl::train::train(split, txl::test::quiet_run(txl::train::StartMode::kResume));
  EXPECT_EQ(metrics_without_timing(dir / "runs/gpu_whole"),
            metrics_without_timing(dir / "runs/gpu_split"));
}

// Compressive memory (conv compressors, trained by the reconstruction loss) trains on the GPU
// to the CPU's parameters, and a run paused and resumed there equals an uninterrupted one.
TEST(Gpu, CompressiveMemoryTrainsOnTheGpuLikeOnTheCpu) {
  TXL_SKIP_WITHOUT_GPU();
  txl::log::ScopedLevel quiet(txl::log::Level::kQuiet);
  TempDir dir;
  auto compressive = [&](const std::string& name, txl::config::Device device) {
    auto c = txl::test::tiny_experiment(dir.path(), name);
    c.model.dropout = 0.0;
    c.model.cmem_len = 4;
    c.model.cmem_rate = 4;
    c.run.device = device;
    return c;
  };
  txl::train::train(compressive("cpu", txl::config::Device::kCpu), txl::test::quiet_run());
  txl::train::train(compressive("gpu", txl::config::Device::kCuda), txl::test::quiet_run());
  auto a = parameters_of(dir / "runs/cpu/checkpoint_last.safetensors");
  auto b = parameters_of(dir / "runs/gpu/checkpoint_last.safetensors");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(txl::test::tensor_near(b[i], a[i], 1e-4, 1e-3)) << i;
  auto split = compressive("gpu_split", txl::config::Device::kCuda);
  txl::train::train(split, txl::test::quiet_run(txl::train::StartMode::kNew, 9));
  txl::train::train(split, txl::test::quiet_run(txl::train::StartMode::kResume));
  EXPECT_EQ(metrics_without_timing(dir / "runs/gpu"),
            metrics_without_timing(dir / "runs/gpu_split"));
}

// A CPU checkpoint loads onto the GPU (every parameter there, the same values) and evaluates
// there to the CPU's figures, in memory mode and with per-token losses.
TEST(Gpu, ACheckpointLoadsOntoTheGpuAndEvaluatesAsOnTheCpu) {
  TXL_SKIP_WITHOUT_GPU();
  txl::log::ScopedLevel quiet(txl::log::Level::kQuiet);
  TempDir dir;
  auto c = txl::test::tiny_experiment(dir.path(), "cpu");
  txl::train::train(c, txl::test::quiet_run());
  const auto path = dir / "runs/cpu/checkpoint_last.safetensors";
  auto on_cpu = txl::models::load_model(path);
  auto on_gpu = txl::models::load_model(path, torch::Device(torch::kCUDA, 0));
  for (const auto& p : on_gpu.model->parameters()) EXPECT_TRUE(p.is_cuda());
  txl::eval::Settings settings = txl::eval::resolve_settings(c);
  txl::data::EncodedSplit split;
  split.ids = torch::randint(on_cpu.vocab_size, {600}, torch::kInt64);  // [600]
  txl::eval::Extras extras;
  extras.token_losses = true;
  const auto a = txl::eval::evaluate(on_cpu.model, split, settings, extras);
  settings.device = torch::Device(torch::kCUDA, 0);
  const auto b = txl::eval::evaluate(on_gpu.model, split, settings, extras);
  EXPECT_NEAR(b.loss, a.loss, 1e-5 * a.loss);
  EXPECT_EQ(b.tokens, a.tokens);
  EXPECT_TRUE(txl::test::tensor_near(b.token_losses, a.token_losses, 1e-4, 1e-4));
}

// On the GPU the counted traffic of a training step is real copies: each chunk's batch goes up,
// the loss and the gradient norm come down in one copy, nothing waits on item().
TEST(Gpu, ATrainingStepCopiesItsBatchUpAndTwoNumbersDown) {
  TXL_SKIP_WITHOUT_GPU();
  TempDir dir;
  const auto c = txl::test::tiny_experiment(dir.path());
  const torch::Device gpu(torch::kCUDA, 0);
  for (const bool bf16 : {false, true}) {
    torch::manual_seed(5);
    txl::models::TransformerLM model(c.model, 30);
    model->to(gpu);
    auto optimizer = txl::train::make_optimizer(c.train, model->parameters());
    txl::train::StepSettings settings;
    settings.device = gpu;
    settings.bf16 = bf16;
    settings.batch_chunk = 2;
    settings.clip = 0.25;
    txl::train::Step step(model, *optimizer, settings, {0, 4});
    const auto b = txl::test::random_batch(5);
    for (int s = 0; s < 3; ++s) {
      txl::DeviceTraffic traffic;
      const auto r = step.run(b, 1e-3);
      EXPECT_TRUE(std::isfinite(r.mean_loss()) && std::isfinite(r.grad_norm)) << "bf16 " << bf16;
      std::string calls;
      for (const auto& call : traffic.calls()) calls += "\n  " + call;
      EXPECT_EQ(traffic.counts().moves, 5 * 2 + 1) << "bf16 " << bf16 << ", counted:" << calls;
      EXPECT_EQ(traffic.counts().reads, 0) << "bf16 " << bf16 << ", counted:" << calls;
    }
    for (const auto& m : step.memory())
      for (const auto& layer : m.layers) EXPECT_TRUE(layer.is_cuda());
  }
}

}  // namespace
