#pragma once
// run.precision: auto. bf16 autocast (fp32 master weights, fp32 sums) where the machine
// multiplies bf16 natively and a short probe of the model's own training step finds bf16 at
// least kBf16MinSpeedup x faster than fp32; fp32 elsewhere. Resolved once, when a run starts (or
// an ablation: every job the same), and stored as fp32 or bf16 in the run's config.yaml and
// checkpoints, so a resume keeps it. docs/performance.md (2026-12-07, fourth entry) has the
// measurements behind it and the validation loss of bf16 training within fp32's seed spread.

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "txl/config/config.h"

namespace txl::train {

inline constexpr double kBf16MinSpeedup = 1.3;

// Whether `device` multiplies bf16 natively: a CUDA GPU, or a CPU with AVX512_BF16 or AMX-BF16.
bool native_bf16(torch::Device device);

struct PrecisionChoice {
  config::Precision precision = config::Precision::kFp32;  // kFp32 or kBf16, never kAuto
  double fp32_seconds = 0.0;  // the probe's median step, fp32; 0 = not measured
  double bf16_seconds = 0.0;  // and under bf16 autocast
  std::string reason;         // one line for the log: what decided
};

// What run.precision: auto stands for on this machine for a model of `config` with `vocab`
// words: without native bf16, fp32 (nothing is measured); else a throwaway model of config.model
// and config.train takes `rows` rows per step (this process's share of train.batch_size) on
// random ids, 2 untimed and 4 timed steps at each precision, alternating, and bf16 is chosen when
// fp32's median step takes at least kBf16MinSpeedup x bf16's. The process's random generators
// (the CPU's, and the device's) are left as they were: a run that resolves to fp32 draws the
// same numbers as one that asked for fp32.
PrecisionChoice choose_precision(const config::ExperimentConfig& config, std::int64_t vocab,
                                 torch::Device device, std::int64_t rows);

}  // namespace txl::train
