#include "txl/train/schedule.h"

#include <algorithm>
#include <cmath>

#include "txl/util/error.h"

namespace txl::train {

double learning_rate(const config::TrainConfig& train, std::int64_t step, double plateau_scale) {
  const double peak = train.lr;
  const std::int64_t warmup = train.warmup_steps;
  if (warmup > 0 && step <= warmup) return peak * static_cast<double>(step) / warmup;
  if (train.schedule == "constant") return peak;
  if (train.schedule == "plateau") return std::max(train.lr_min, peak * plateau_scale);
  if (train.schedule == "inv_sqrt") {
    // lr / sqrt(step / warmup) after warm-up: continuous at the end of warm-up.
    const double w = static_cast<double>(std::max<std::int64_t>(warmup, 1));
    return std::max(train.lr_min, peak * std::sqrt(w / static_cast<double>(std::max<std::int64_t>(step, 1))));
  }
  if (train.schedule == "cosine") {
    // Cosine from peak to lr_min over the steps after warm-up; without max_steps it stays at
    // peak (there is no horizon to anneal to).
    if (train.max_steps <= 0) return peak;
    const double span = static_cast<double>(std::max<std::int64_t>(train.max_steps - warmup, 1));
    const double progress = std::clamp((step - warmup) / span, 0.0, 1.0);
    return train.lr_min + 0.5 * (peak - train.lr_min) * (1.0 + std::cos(M_PI * progress));
  }
  TXL_FAIL("train.schedule: '", train.schedule, "' is not one of cosine | inv_sqrt | constant | plateau");
}

}  // namespace txl::train
