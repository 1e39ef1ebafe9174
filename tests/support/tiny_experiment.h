#pragma once
// A tiny experiment on the synthetic recall corpus, with every file it writes (cache, runs)
// inside a test's TempDir: seconds on one core, for trainer, evaluator and ablation tests.

#include <filesystem>

#include "txl/config/config.h"
#include "txl/data/batch.h"
#include "txl/data/tokenizer.h"
#include "txl/train/trainer.h"

namespace txl::test {

// 2 layers, d_model 32, synthetic corpus of 200 documents, word tokenizer, 20 steps.
config::ExperimentConfig tiny_experiment(const std::filesystem::path& dir,
                                         const std::string& name = "tiny");

// A word tokenizer of exactly `vocab` ids (vocab - 3 words "w0", "w1", ... and the 3 specials),
// for model checkpoints of tiny models (30 ids: the tiny model's test vocabulary).
std::shared_ptr<data::Tokenizer> word_tokenizer(int vocab = 30);

// A batch of 4 rows of 12 random tokens of a 30-id vocabulary (the tiny model's test vocabulary),
// every position real and scored, no row reset; `seed` chooses the tokens.
data::Batch random_batch(std::uint64_t seed);

// Options of a quiet training run: a new run by default, or a resume; pause_at_step 0 = none.
train::TrainOptions quiet_run(train::StartMode start = train::StartMode::kNew,
                              std::int64_t pause_at_step = 0);

}  // namespace txl::test
