#include "txl/train/schedule.h"

#include <algorithm>
#include <cmath>

#include "txl/util/error.h"

namespace txl::train {

double learning_rate(const config::TrainConfig& train, std::int64_t step, double plateau_scale) {
  const double peak = train.lr;
  const std::int64_t warmup = train.warmup_steps;
  if (warmup > 0 && step <= warmup) return peak * static_cast<double>(step) / warmup;
  switch (train.schedule) {
    case config::Schedule::kConstant:
      return peak;
    case config::Schedule::kPlateau:
      return std::max(train.lr_min, peak * plateau_scale);
    case config::Schedule::kInvSqrt: {
      // lr / sqrt(step / warmup) after warm-up: continuous at the end of warm-up.
      const double w = static_cast<double>(std::max<std::int64_t>(warmup, 1));
      const double at = static_cast<double>(std::max<std::int64_t>(step, 1));
      return std::max(train.lr_min, peak * std::sqrt(w / at));
    }
    case config::Schedule::kCosine: {
      // Cosine from peak to lr_min over the steps after warm-up; without max_steps it stays at
      // peak (there is no horizon to anneal to).
      if (train.max_steps <= 0) return peak;
      const double span = static_cast<double>(std::max<std::int64_t>(train.max_steps - warmup, 1));
      const double progress = std::clamp((step - warmup) / span, 0.0, 1.0);
      return train.lr_min + 0.5 * (peak - train.lr_min) * (1.0 + std::cos(M_PI * progress));
    }
  }
  // Only a value cast from a number reaches here: the loader takes names from the table alone.
  TXL_FAIL("train.schedule: '", config::to_string(train.schedule), "' is not one of ",
           config::enum_choices<config::Schedule>());
}

}  // namespace txl::train

namespace txl::train {

Schedule::Schedule(const config::TrainConfig& train, int log_interval)
    : train_(train), log_interval_(log_interval) {}

double Schedule::learning_rate(const TrainState& state) const {
  return train::learning_rate(train_, state.step + 1, state.lr_scale);
}

bool Schedule::log_due(std::int64_t step) const {
  return step % log_interval_ == 0 || step == train_.max_steps;
}

bool Schedule::eval_due(std::int64_t step) const {
  return train_.eval_interval > 0 && step % train_.eval_interval == 0;
}

bool Schedule::checkpoint_due(std::int64_t step) const {
  return train_.checkpoint_interval > 0 && step % train_.checkpoint_interval == 0;
}

std::string Schedule::stop_reason(const TrainState& state, bool out_of_time, int signal,
                                  std::int64_t pause_at_step) const {
  if (train_.max_steps > 0 && state.step >= train_.max_steps) return "max_steps";
  if (train_.max_tokens > 0 && state.tokens >= train_.max_tokens) return "max_tokens";
  // A run that stopped early stays stopped when it is resumed with the same patience.
  if (train_.patience > 0 && state.evals_without_gain >= train_.patience) return "early stop";
  if (out_of_time) return "max_minutes";
  if (signal != 0) return "signal " + std::to_string(signal);
  if (pause_at_step > 0 && state.step >= pause_at_step) return "pause_at_step";
  return "";
}

Schedule::Validation Schedule::record_validation(TrainState& state, double loss,
                                                 double bound) const {
  Validation v;
  // Only a finite loss under the divergence bound can be the best: checkpoint_best always holds
  // weights the divergence guard would keep in checkpoint_last.
  v.improved = std::isfinite(loss) && !(loss > bound) &&
               (state.best_step < 0 || loss < state.best_valid_loss);
  state.last_eval_step = state.step;
  if (v.improved) {
    state.best_valid_loss = loss;
    state.best_step = state.step;
    state.evals_without_gain = 0;
  } else {
    ++state.evals_without_gain;
  }
  if (train_.schedule == config::Schedule::kPlateau) {
    if (v.improved) {
      state.plateau_bad_evals = 0;
    } else if (++state.plateau_bad_evals > train_.plateau_patience) {
      state.lr_scale *= train_.decay_rate;
      state.plateau_bad_evals = 0;
      v.decayed = true;
    }
  }
  v.early_stop = train_.patience > 0 && state.evals_without_gain >= train_.patience;
  return v;
}

double Schedule::eta_seconds(const TrainState& state, std::int64_t start_step,
                             std::int64_t start_tokens, double run_seconds, double elapsed) const {
  double eta = -1;
  if (train_.max_steps > 0)
    eta = (train_.max_steps - state.step) * run_seconds /
          std::max<std::int64_t>(state.step - start_step, 1);
  if (train_.max_tokens > 0) {
    const double pace = (state.tokens - start_tokens) / std::max(run_seconds, 1e-9);
    eta = (train_.max_tokens - state.tokens) / std::max(pace, 1e-9);
  }
  if (train_.max_minutes > 0)
    eta = std::min(eta < 0 ? 1e18 : eta, train_.max_minutes * 60 - elapsed);
  return eta;
}

}  // namespace txl::train
