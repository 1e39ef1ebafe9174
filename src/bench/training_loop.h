#pragma once
// The evaluator's memory-mode segment on random token ids, shared by the throughput measurements
// and the profiles (the trainer's step on random ids is train::RandomSteps), and the options of
// those steps from a phase's. Private to src/bench.

#include <torch/torch.h>

#include <cstdint>
#include <memory>

#include "txl/bench/measure.h"
#include "txl/config/config.h"
#include "txl/data/stream.h"
#include "txl/eval/settings.h"
#include "txl/models/transformer_lm.h"
#include "txl/train/random_steps.h"

namespace txl::bench::detail {

// train::RandomSteps' options from a phase's: its rows, device and seed.
train::RandomStepsOptions random_steps_options(const PhaseOptions& options);

// Memory-mode evaluation of a model on random ids: B streams of segments of Q = settings.tgt_len
// with memory M = settings.mem_len, each scored by eval::score_batch as the evaluator scores it
// (B = PhaseOptions::batch_size, bf16 autocast when PhaseOptions::bf16). The
// memory starts full (random hidden states of the right shape: the cost of a segment does not
// depend on their values), so a few untimed segments stand in for the ceil(M / Q) a real pass
// needs to fill it; the stream starts at its second batch, which does not reset the memory, as
// almost every batch of a real pass.
class EvalLoop {
 public:
  // Enough random ids for `segments` segments (the stream must not run out).
  EvalLoop(models::TransformerLM model, std::int64_t vocab, const eval::Settings& settings,
           const PhaseOptions& options, std::int64_t segments);

  // One segment; returns its mean nll over the scored tokens (a sanity check: finite).
  double segment();

  std::int64_t tokens_per_segment() const { return settings_.batch_size * settings_.tgt_len; }

 private:
  models::TransformerLM model_;
  eval::Settings settings_;
  std::unique_ptr<data::EvalStream> stream_;
  std::int64_t index_ = 1;
  models::Memory memory_;
};

}  // namespace txl::bench::detail
