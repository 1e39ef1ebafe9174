#pragma once
// The speed of generation (generation::generate): new tokens per second at a batch size, and the
// time per new token at a memory length, on a model of random weights (speed does not depend on
// them) reading random prompts, greedy (no draw), no <eos>: every row generates every token.
//
// Legend: B rows, C context (prompt tokens per row, and the memory length when given), N new
// tokens per row.

#include <cstdint>
#include <string>

#include "txl/bench/profile.h"
#include "txl/config/config.h"

namespace txl::bench {

struct GenerationOptions {
  std::int64_t batch_size = 1;    // B prompts generated together
  std::int64_t context = 128;     // C prompt tokens per row, read before the timed part
  std::int64_t mem_len = -1;      // decoding memory; -1 = the experiment's (eval.mem_len)
  std::int64_t new_tokens = 256;  // N generated per row, timed
  int warmup = 1;                 // untimed generations
  int repetitions = 3;            // timed ones (median)
  std::uint64_t seed = 1234;      // weights and prompts
  bool drop_finished = true;      // generation::GenerateOptions::drop_finished
};

struct GenerationResult {
  std::int64_t batch_size = 0, context = 0, tgt_len = 0, mem_len = 0, new_tokens = 0;
  double tokens_per_s = 0.0;       // B N / median generation time (prompt reading excluded)
  double ms_per_token = 0.0;       // median generation time / N: one step of the whole batch
  double read_tokens_per_s = 0.0;  // prompt tokens read per second (median run)
};

// Generates on `config`'s model (config.model, its eval lengths; run.device) with vocabulary
// `vocab` as `options` says. Throws txl::Error for a configuration the model rejects.
GenerationResult measure_generation(const config::ExperimentConfig& config, std::int64_t vocab,
                                    const GenerationOptions& options);

// One generation of options.new_tokens per row after options.warmup others, under the profiler.
StepProfile profile_generation(const config::ExperimentConfig& config, std::int64_t vocab,
                               const GenerationOptions& options, bool by_shape = false);

}  // namespace txl::bench
