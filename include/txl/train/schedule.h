#pragma once
// Learning-rate schedules: linear warm-up from 0, then cosine (to lr_min at max_steps),
// inv_sqrt (paper code: lr * min(step / warmup^1.5, 1 / sqrt(step)) scaled to lr at the end of
// warm-up), constant, or plateau (constant times a factor that decays when validation stalls).

#include <cstdint>

#include "txl/config/config.h"

namespace txl::train {

// The learning rate for optimizer step `step` (1-based: the step about to be taken).
// `plateau_scale` is the plateau schedule's current factor (1 for the other schedules).
double learning_rate(const config::TrainConfig& train, std::int64_t step,
                     double plateau_scale = 1.0);

}  // namespace txl::train
