#include "txl/train/precision.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <vector>

#include "txl/train/random_steps.h"
#include "txl/util/cpu.h"
#include "txl/util/error.h"

namespace txl::train {

namespace {

// Restores the default generators of the CPU and of `device` when it leaves scope.
class KeepGenerators {
 public:
  explicit KeepGenerators(torch::Device device)
      : cpu_(at::detail::getDefaultCPUGenerator()), cpu_state_(cpu_.get_state()) {
    if (!device.is_cpu()) {
      device_ = at::globalContext().defaultGenerator(device);
      device_state_ = device_->get_state();
    }
  }
  ~KeepGenerators() {
    cpu_.set_state(cpu_state_);
    if (device_) device_->set_state(device_state_);
  }
  KeepGenerators(const KeepGenerators&) = delete;
  KeepGenerators& operator=(const KeepGenerators&) = delete;

 private:
  at::Generator cpu_;  // a handle: the process's generator itself
  torch::Tensor cpu_state_;
  std::optional<at::Generator> device_;
  torch::Tensor device_state_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

bool native_bf16(torch::Device device) {
  return device.is_cuda() || (device.is_cpu() && util::cpu_features().bf16);
}

PrecisionChoice choose_precision(const config::ExperimentConfig& config, std::int64_t vocab,
                                 torch::Device device, std::int64_t rows) {
  PrecisionChoice choice;
  if (!native_bf16(device)) {
    choice.reason = "fp32: this CPU has no native bf16 (AVX512_BF16 or AMX-BF16)";
    return choice;
  }
  constexpr int kWarmup = 2, kTimed = 4;
  KeepGenerators keep(device);
  RandomStepsOptions options;
  options.batch_size = rows;
  options.device = device;
  options.seed = config.run.seed;
  RandomSteps steps(config, vocab, options, 2 * (kWarmup + kTimed));
  std::vector<double> seconds[2];
  for (int i = 0; i < kWarmup + kTimed; ++i) {
    for (const bool bf16 : {false, true}) {
      if (device.is_cuda()) torch::cuda::synchronize(device.index());
      const auto start = std::chrono::steady_clock::now();
      steps.step(bf16);
      if (device.is_cuda()) torch::cuda::synchronize(device.index());
      const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
      if (i >= kWarmup) seconds[bf16].push_back(took.count());
    }
  }
  choice.fp32_seconds = median(seconds[0]);
  choice.bf16_seconds = median(seconds[1]);
  const double speedup = choice.fp32_seconds / choice.bf16_seconds;
  const bool bf16 = speedup >= kBf16MinSpeedup;
  choice.precision = bf16 ? config::Precision::kBf16 : config::Precision::kFp32;
  choice.reason = fmt::format(
      "{}: a training step took {:.1f} ms in fp32 and {:.1f} ms under bf16 autocast ({:.2f}x; bf16 "
      "from {:.1f}x), median of {} on random ids, {} rows",
      bf16 ? "bf16" : "fp32", 1e3 * choice.fp32_seconds, 1e3 * choice.bf16_seconds, speedup,
      kBf16MinSpeedup, kTimed, rows);
  return choice;
}

}  // namespace txl::train
