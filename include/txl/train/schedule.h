#pragma once
// The training schedule: the learning rate of each step, and everything the trainer's loop asks
// between steps (when to stop, log, validate and checkpoint; what a validation result does to
// the best loss, early stopping and the plateau factor; how long is left). No I/O: the trainer
// acts on its answers.
//
// Learning rates: linear warm-up from 0, then cosine (to lr_min at max_steps), inv_sqrt (paper
// code: lr * min(step / warmup^1.5, 1 / sqrt(step)) scaled to lr at the end of warm-up),
// constant, or plateau (constant times a factor that decays when validation stalls).

#include <cstdint>
#include <limits>
#include <string>

#include "txl/config/config.h"
#include "txl/train/state.h"

namespace txl::train {

// The learning rate for optimizer step `step` (1-based: the step about to be taken).
// `plateau_scale` is the plateau schedule's current factor (1 for the other schedules).
double learning_rate(const config::TrainConfig& train, std::int64_t step,
                     double plateau_scale = 1.0);

class Schedule {
 public:
  Schedule(const config::TrainConfig& train, int log_interval);

  // The learning rate of the step about to be taken (state.step + 1).
  double learning_rate(const TrainState& state) const;

  // After step `step` is done: a progress record, a validation, a checkpoint?
  bool log_due(std::int64_t step) const;
  bool eval_due(std::int64_t step) const;
  bool checkpoint_due(std::int64_t step) const;

  // Why training stops before the next step, or "" to go on: "max_steps", "max_tokens",
  // "early stop" (train.patience validations without gain: a resumed early-stopped run),
  // "max_minutes" (out_of_time, which the ranks agreed on), "signal N", "pause_at_step".
  std::string stop_reason(const TrainState& state, bool out_of_time, int signal,
                          std::int64_t pause_at_step) const;

  struct Validation {
    bool improved = false;    // a new best: write checkpoint_best
    bool decayed = false;     // plateau: the learning rate was just multiplied by decay_rate
    bool early_stop = false;  // train.patience validations in a row without a new best
  };
  // Records a validation loss in `state`: the best (finite losses not above `bound`, the
  // divergence guard's train.divergence_factor x ln(vocabulary); infinity when the guard is off),
  // the validations without gain, the plateau factor.
  Validation record_validation(TrainState& state, double loss,
                               double bound = std::numeric_limits<double>::infinity()) const;

  // Seconds until a limit is reached at this invocation's pace (`run_seconds` since it started
  // at `start_step` / `start_tokens`; `elapsed` over every invocation), or -1 when unknown.
  double eta_seconds(const TrainState& state, std::int64_t start_step, std::int64_t start_tokens,
                     double run_seconds, double elapsed) const;

 private:
  const config::TrainConfig& train_;
  int log_interval_;
};

}  // namespace txl::train
