#pragma once
// A tiny experiment on the synthetic recall corpus, with every file it writes (cache, runs)
// inside a test's TempDir: seconds on one core, for trainer, evaluator and ablation tests.

#include <filesystem>

#include "txl/config/config.h"
#include "txl/train/trainer.h"

namespace txl::test {

// 2 layers, d_model 32, synthetic corpus of 200 documents, word tokenizer, 20 steps.
config::ExperimentConfig tiny_experiment(const std::filesystem::path& dir,
                                         const std::string& name = "tiny");

// Options of a quiet training run: a new run by default, or a resume; pause_at_step 0 = none.
train::TrainOptions quiet_run(train::StartMode start = train::StartMode::kNew,
                              std::int64_t pause_at_step = 0);

}  // namespace txl::test
