#pragma once
// The evaluation settings an experiment asks for, with the "inherit" values of its eval section
// (eval.tgt_len 0, eval.mem_len -1, eval.clamp_len -2, eval.same_length -1, eval.window 0,
// eval.mem_init model) replaced by what they inherit. The one place those values are read: the
// validator's rules and eval::resolve_settings both start from effective_eval.

#include "txl/config/config.h"

namespace txl::config {

struct EffectiveEval {
  EvalMode mode = EvalMode::kMemory;   // eval.mode
  int tgt_len = 0;                     // Q: eval.tgt_len, 0 = model.tgt_len
  int mem_len = 0;                     // M: eval.mem_len, -1 = model.mem_len; 0 outside memory mode
  int requested_mem_len = 0;           // eval.mem_len, -1 = model.mem_len, whatever the mode
  int clamp_len = -1;                  // eval.clamp_len, -2 = model.clamp_len; -1 = no clamp
  bool same_length = false;            // eval.same_length 0 or 1, -1 = model.same_length
  MemInit mem_init = MemInit::kEmpty;  // eval.mem_init, model = model.mem_init
  int window = 0;                      // sliding window L: eval.window, 0 = tgt_len
};

// The effective evaluation settings of `config`. Reads the values as they are (no range checks:
// the validator applies its rules to the result).
EffectiveEval effective_eval(const ExperimentConfig& config);

}  // namespace txl::config
